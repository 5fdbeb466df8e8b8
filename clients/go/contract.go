// Package gateway emits ModelBackfill's foreground requests from a Go gateway over NATS JetStream: NKey login with
// the _INBOX_<user> reply inbox, reconnect forever, the newest request per model buffered through an outage, never
// blocking a request handler longer than the publish timeout and never panicking into it. The contract is
// events/README.md of the model-backfill repository; clients/conformance/ keeps this client in step with the
// TypeScript and Python ones.
package gateway

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
)

const (
	EventType = "ai.flexinfer.foreground.request"
	// Subject is the foreground subject; foreground requests go on Subject.<namespace>.<model>.
	Subject             = "flexinfer.events.foreground.request"
	WorkloadClassHeader = "X-FlexInfer-Workload-Class"
	WorkloadClassEnv    = "FLEXINFER_WORKLOAD_CLASS"
)

var (
	namespaceRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	nameRE      = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// InvalidTarget says why a namespace/model pair cannot be published; nil when it can.
func InvalidTarget(namespace, model string) error {
	if len(namespace) > 63 || !namespaceRE.MatchString(namespace) {
		return fmt.Errorf("namespace %q is not a Kubernetes namespace name (DNS-1123 label)", namespace)
	}
	if len(model) > 253 || !nameRE.MatchString(model) {
		return fmt.Errorf("model %q is not a Kubernetes object name (DNS-1123 subdomain)", model)
	}
	return nil
}

// PerModelSubject is where a model's foreground requests go (the stream keeps the newest per model).
func PerModelSubject(namespace, model string) string { return Subject + "." + namespace + "." + model }

// IsBackground says whether a workload class is background: never foreground, never published.
func IsBackground(workloadClass string) bool {
	return strings.EqualFold(strings.TrimSpace(workloadClass), "background")
}

// FormatTime is RFC 3339 in UTC with milliseconds, as every client writes it: 2026-01-01T00:00:01.000Z.
func FormatTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

type eventData struct {
	Namespace     string `json:"namespace"`
	Model         string `json:"model"`
	WorkloadClass string `json:"workloadClass"`
}

type event struct {
	SpecVersion     string    `json:"specversion"`
	ID              string    `json:"id"`
	Source          string    `json:"source"`
	Type            string    `json:"type"`
	Time            string    `json:"time"`
	DataContentType string    `json:"datacontenttype"`
	Data            eventData `json:"data"`
	TraceParent     string    `json:"traceparent,omitempty"`
	TraceState      string    `json:"tracestate,omitempty"`
}

// EncodeForegroundRequest is the structured-mode CloudEvent (JSON) of one foreground request.
func EncodeForegroundRequest(r Request, id, source string) []byte {
	b, _ := json.Marshal(event{
		SpecVersion:     "1.0",
		ID:              id,
		Source:          source,
		Type:            EventType,
		Time:            FormatTime(r.Time),
		DataContentType: "application/json",
		Data:            eventData{Namespace: r.Namespace, Model: r.Model, WorkloadClass: "foreground"},
		TraceParent:     r.TraceParent,
		TraceState:      r.TraceState,
	})
	return b
}
