package gateway_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"os"
	"time"

	gateway "github.com/flexinfer/model-backfill/clients/go"
)

// A net/http gateway: every request that is not background class reports a foreground request for the Model the
// model map names, then goes on to the model (docs/gateways.md). Compiled by go test, not run.
func Example() {
	em, err := gateway.Open(os.Getenv("NATS_URL"), gateway.Options{Source: "my-go-gateway", ThrottleMs: 250})
	if err != nil {
		log.Fatal(err) // configuration errors only (a missing or placeholder seed); NATS may be down
	}
	defer em.Close(2 * time.Second)
	mm := &gateway.ModelMap{DefaultNamespace: gateway.DefaultNamespace}
	if f := os.Getenv("FLEXINFER_MODEL_MAP"); f != "" {
		if mm, err = gateway.LoadModelMap(f); err != nil {
			log.Fatal(err)
		}
	}
	upstream := http.NotFoundHandler() // the model's reverse proxy
	withForeground := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		r.Body = io.NopCloser(bytes.NewReader(body))
		var req struct {
			Model string `json:"model"`
		}
		_ = json.Unmarshal(body, &req)
		if t, ok := mm.Resolve(req.Model, r.URL.Path, r.Header); ok && !gateway.RequestIsBackground(r.Header) {
			em.Emit(gateway.Request{Namespace: t.Namespace, Model: t.Model}) // <= 1 s, never panics
		}
		upstream.ServeHTTP(w, r)
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", withForeground))
}
