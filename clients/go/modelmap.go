package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// DefaultNamespace is where a model is looked for when no rule names a namespace: the one FlexInfer installs into.
const DefaultNamespace = "flexinfer-system"

// MaxRules bounds a map (configuration, not data).
const MaxRules = 10_000

// Match selects requests: exactly one of Model (the OpenAI model, exactly), Route (a path prefix) or Header (a
// header present — with Value, that has exactly that value).
type Match struct {
	Model  *string `json:"model,omitempty"`
	Route  *string `json:"route,omitempty"`
	Header *string `json:"header,omitempty"`
	Value  *string `json:"value,omitempty"`
}

// Rule maps the requests it matches to To: "namespace/model", "namespace/*" (the request's own model), or absent
// on a header rule (the header's value is the target, namespace/model or a model in the default namespace).
type Rule struct {
	Match *Match  `json:"match"`
	To    *string `json:"to,omitempty"`
}

// ModelMap is the declarative mapping every client reads (clients/model-map.md): rules in order, the first match
// wins; no rule matching, the OpenAI model is the Model's name in DefaultNamespace.
type ModelMap struct {
	DefaultNamespace string `json:"defaultNamespace"`
	Rules            []Rule `json:"rules"`
}

// Target is the Model a request is for.
type Target struct{ Namespace, Model string }

// ParseModelMap checks a map (JSON); the error names the first thing wrong (at start, never per request).
func ParseModelMap(data []byte) (*ModelMap, error) {
	fail := func(format string, args ...any) (*ModelMap, error) {
		return nil, fmt.Errorf("model map: "+format, args...)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return fail("not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m ModelMap
	if err := dec.Decode(&m); err != nil {
		// Name the rule an error is in when the decoder knows the field (unknown field, wrong type).
		return fail("%v", describeJSONError(data, err))
	}
	if m.DefaultNamespace == "" {
		m.DefaultNamespace = DefaultNamespace
	}
	if err := InvalidTarget(m.DefaultNamespace, "x"); err != nil {
		return fail("defaultNamespace: %v", err)
	}
	if len(m.Rules) > MaxRules {
		return fail("more than %d rules", MaxRules)
	}
	for i, r := range m.Rules {
		at := fmt.Sprintf("rules[%d]", i)
		if r.Match == nil {
			return fail("%s.match is missing", at)
		}
		n := 0
		for _, p := range []*string{r.Match.Model, r.Match.Route, r.Match.Header} {
			if p != nil {
				n++
			}
		}
		if n != 1 {
			return fail("%s.match needs exactly one of model, route, header", at)
		}
		for name, p := range map[string]*string{"model": r.Match.Model, "route": r.Match.Route, "header": r.Match.Header, "value": r.Match.Value} {
			if p != nil && *p == "" {
				return fail("%s.match.%s is not a non-empty string", at, name)
			}
		}
		if r.Match.Value != nil && r.Match.Header == nil {
			return fail("%s.match.value needs header", at)
		}
		if r.To == nil {
			if r.Match.Header == nil {
				return fail("%s.to is missing (only a header rule may take its target from the header)", at)
			}
			continue
		}
		parts := strings.Split(*r.To, "/")
		if len(parts) != 2 {
			return fail("%s.to %q is not namespace/model", at, *r.To)
		}
		model := parts[1]
		if model == "*" {
			model = "x"
		}
		if err := InvalidTarget(parts[0], model); err != nil {
			return fail("%s.to: %v", at, err)
		}
	}
	return &m, nil
}

// describeJSONError adds the rule index to a decoding error when the input is a map whose rules can be counted.
func describeJSONError(data []byte, err error) string {
	var loose struct {
		Rules []json.RawMessage `json:"rules"`
	}
	if json.Unmarshal(data, &loose) == nil {
		for i, raw := range loose.Rules {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			var r Rule
			if e := dec.Decode(&r); e != nil {
				return fmt.Sprintf("rules[%d]: %v", i, e)
			}
		}
	}
	if strings.Contains(err.Error(), "rules") {
		return "rules: " + err.Error()
	}
	return err.Error()
}

// LoadModelMap reads and checks a map file.
func LoadModelMap(path string) (*ModelMap, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("model map: %w", err)
	}
	m, err := ParseModelMap(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Resolve says which Model a request is for; ok is false when the map cannot name one (nothing is published).
func (m *ModelMap) Resolve(model, route string, header http.Header) (Target, bool) {
	for _, r := range m.Rules {
		if r.Match.Model != nil && model != *r.Match.Model {
			continue
		}
		if r.Match.Route != nil && !strings.HasPrefix(route, *r.Match.Route) {
			continue
		}
		if r.Match.Header != nil {
			values := header.Values(*r.Match.Header)
			if len(values) == 0 || (r.Match.Value != nil && values[0] != *r.Match.Value) {
				continue
			}
			if r.To == nil {
				return m.target(strings.TrimSpace(values[0]), model)
			}
		}
		return m.target(*r.To, model)
	}
	if model == "" || strings.Contains(model, "/") {
		return Target{}, false
	}
	return m.target(model, "")
}

func (m *ModelMap) target(spec, requestModel string) (Target, bool) {
	ns, name := m.DefaultNamespace, spec
	if i := strings.Index(spec, "/"); i >= 0 {
		ns, name = spec[:i], spec[i+1:]
	}
	if name == "*" {
		if requestModel == "" {
			return Target{}, false
		}
		name = requestModel
	}
	if InvalidTarget(ns, name) != nil {
		return Target{}, false
	}
	return Target{Namespace: ns, Model: name}, true
}

// RequestIsBackground: the X-FlexInfer-Workload-Class: background header, or FLEXINFER_WORKLOAD_CLASS=background
// where the gateway (or the workload calling it) runs. Background requests are never foreground.
func RequestIsBackground(header http.Header) bool {
	return IsBackground(header.Get(WorkloadClassHeader)) || IsBackground(os.Getenv(WorkloadClassEnv))
}
