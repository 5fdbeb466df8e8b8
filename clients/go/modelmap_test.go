package gateway

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func conformance(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "conformance", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func headerOf(m map[string]string) http.Header {
	h := http.Header{}
	for k, v := range m {
		h.Add(k, v)
	}
	return h
}

// The shared model-map conformance cases (clients/conformance/model-map.json).
func TestModelMapConformance(t *testing.T) {
	var data struct {
		Cases []struct {
			Name    string          `json:"name"`
			Map     json.RawMessage `json:"map"`
			Request struct {
				Model   string            `json:"model"`
				Route   string            `json:"route"`
				Headers map[string]string `json:"headers"`
			} `json:"request"`
			Expect *struct{ Namespace, Model string } `json:"expect"`
		} `json:"cases"`
		Invalid []struct {
			Name  string          `json:"name"`
			Map   json.RawMessage `json:"map"`
			Error string          `json:"error"`
		} `json:"invalid"`
		WorkloadClass []struct {
			Name       string            `json:"name"`
			Headers    map[string]string `json:"headers"`
			Env        *string           `json:"env"`
			Background bool              `json:"background"`
		} `json:"workloadClass"`
	}
	conformance(t, "model-map.json", &data)
	for _, c := range data.Cases {
		t.Run(c.Name, func(t *testing.T) {
			m, err := ParseModelMap(c.Map)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := m.Resolve(c.Request.Model, c.Request.Route, headerOf(c.Request.Headers))
			if c.Expect == nil {
				if ok {
					t.Fatalf("want nothing, got %+v", got)
				}
				return
			}
			if !ok || got.Namespace != c.Expect.Namespace || got.Model != c.Expect.Model {
				t.Fatalf("want %+v, got %+v (ok %v)", *c.Expect, got, ok)
			}
		})
	}
	for _, c := range data.Invalid {
		t.Run("refuses "+c.Name, func(t *testing.T) {
			_, err := ParseModelMap(c.Map)
			if err == nil || !strings.Contains(err.Error(), c.Error) {
				t.Fatalf("want an error naming %q, got %v", c.Error, err)
			}
		})
	}
	for _, c := range data.WorkloadClass {
		t.Run("workload class: "+c.Name, func(t *testing.T) {
			env := ""
			if c.Env != nil {
				env = *c.Env
			}
			t.Setenv(WorkloadClassEnv, env)
			if got := RequestIsBackground(headerOf(c.Headers)); got != c.Background {
				t.Fatalf("want %v, got %v", c.Background, got)
			}
		})
	}
}
