package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The server of test/integration/clients/harness.ts: a real nats-server running deploy/nats/auth.conf, the gateway's
// NKey seed, and a control to stop and start it and read what was stored. Run through
// `npx vitest run test/integration/clients/go.test.ts`.
type harness struct{ url, seed, control string }

func server(t *testing.T) harness {
	h := harness{os.Getenv("FLEXINFER_TEST_NATS_URL"), os.Getenv("FLEXINFER_TEST_NKEY_SEED_FILE"), os.Getenv("FLEXINFER_TEST_CONTROL_URL")}
	if h.url == "" || h.seed == "" || h.control == "" {
		t.Skip("no test nats-server: run through npx vitest run test/integration/clients/go.test.ts")
	}
	return h
}

func (h harness) call(t *testing.T, method, path string, out any) {
	t.Helper()
	req, _ := http.NewRequest(method, h.control+path, nil)
	c := http.Client{Timeout: 30 * time.Second}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("%s %s: %d", method, path, res.StatusCode)
	}
	if out != nil {
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
}

type recorded struct {
	Subject  string         `json:"subject"`
	Event    map[string]any `json:"event"`
	Rejected *string        `json:"rejected"`
}

func (h harness) events(t *testing.T) []recorded {
	var out []recorded
	h.call(t, "GET", "/events", &out)
	return out
}

func (h harness) settle(t *testing.T, expected int) []recorded {
	deadline := time.Now().Add(20 * time.Second)
	for len(h.events(t)) < expected && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(700 * time.Millisecond)
	return h.events(t)
}

func waitConnected(t *testing.T, e *Emitter) {
	deadline := time.Now().Add(10 * time.Second)
	for !e.Connected() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !e.Connected() {
		t.Fatal("not connected after 10 s")
	}
}

type expectedEvent struct {
	Subject string            `json:"subject"`
	Time    string            `json:"time"`
	Data    map[string]string `json:"data"`
}

func sortEvents(es []expectedEvent) {
	sort.Slice(es, func(i, j int) bool {
		if es[i].Subject != es[j].Subject {
			return es[i].Subject < es[j].Subject
		}
		return es[i].Time < es[j].Time
	})
}

// The shared emitter scenarios (clients/conformance/emitter.json).
func TestEmitterConformance(t *testing.T) {
	h := server(t)
	var data struct {
		Scenarios []struct {
			Name    string `json:"name"`
			Options struct {
				Source      string `json:"source"`
				ThrottleMs  int    `json:"throttleMs"`
				MaxBuffered int    `json:"maxBuffered"`
			} `json:"options"`
			Steps []struct {
				Emit *struct {
					Namespace, Model, WorkloadClass, Time string
				} `json:"emit"`
				Down  bool `json:"down"`
				Up    bool `json:"up"`
				Sleep int  `json:"sleep"`
			} `json:"steps"`
			Outcomes []Outcome       `json:"outcomes"`
			Events   []expectedEvent `json:"events"`
			Drops    [][2]string     `json:"drops"`
		} `json:"scenarios"`
	}
	conformance(t, "emitter.json", &data)
	for _, s := range data.Scenarios {
		t.Run(s.Name, func(t *testing.T) {
			h.call(t, "POST", "/reset", nil)
			var mu sync.Mutex
			drops := [][2]string{}
			e, err := Open(h.url, Options{
				Credentials: Credentials{NKeySeedFile: h.seed},
				Source:      s.Options.Source,
				ThrottleMs:  s.Options.ThrottleMs,
				MaxBuffered: s.Options.MaxBuffered,
				OnDrop: func(r Request, why DropReason) {
					mu.Lock()
					drops = append(drops, [2]string{r.Model, string(why)})
					mu.Unlock()
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(time.Second)
			waitConnected(t, e)
			var outcomes []Outcome
			var slowest time.Duration
			for _, step := range s.Steps {
				switch {
				case step.Emit != nil:
					at, err := time.Parse(time.RFC3339Nano, step.Emit.Time)
					if err != nil {
						t.Fatal(err)
					}
					started := time.Now()
					outcomes = append(outcomes, e.Emit(Request{
						Namespace: step.Emit.Namespace, Model: step.Emit.Model, WorkloadClass: step.Emit.WorkloadClass, Time: at,
					}))
					slowest = max(slowest, time.Since(started))
				case step.Down:
					h.call(t, "POST", "/down", nil)
				case step.Up:
					h.call(t, "POST", "/up", nil)
				default:
					time.Sleep(time.Duration(step.Sleep) * time.Millisecond)
				}
			}
			if !reflect.DeepEqual(outcomes, s.Outcomes) {
				t.Fatalf("outcomes: want %v, got %v", s.Outcomes, outcomes)
			}
			if slowest > 1200*time.Millisecond {
				t.Fatalf("an emit took %v", slowest)
			}
			stored := h.settle(t, len(s.Events))
			got := []expectedEvent{}
			ids := map[string]bool{}
			for _, r := range stored {
				if r.Rejected != nil {
					t.Fatalf("the functions' decoder refuses %v: %s", r.Event, *r.Rejected)
				}
				ev := r.Event
				if ev["specversion"] != "1.0" || ev["type"] != EventType || ev["datacontenttype"] != "application/json" || ev["source"] != s.Options.Source {
					t.Fatalf("envelope: %v", ev)
				}
				id, _ := ev["id"].(string)
				if id == "" || ids[id] {
					t.Fatalf("id %q empty or repeated", id)
				}
				ids[id] = true
				d := map[string]string{}
				for k, v := range ev["data"].(map[string]any) {
					d[k] = fmt.Sprint(v)
				}
				got = append(got, expectedEvent{Subject: r.Subject, Time: fmt.Sprint(ev["time"]), Data: d})
			}
			want := append([]expectedEvent{}, s.Events...)
			sortEvents(got)
			sortEvents(want)
			if len(want) == 0 && len(got) == 0 {
				got, want = nil, nil
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("events: want %+v, got %+v", want, got)
			}
			e.Close(time.Second)
			mu.Lock()
			defer mu.Unlock()
			if len(s.Drops) == 0 {
				s.Drops = [][2]string{}
			}
			if !reflect.DeepEqual(drops, s.Drops) {
				t.Fatalf("drops: want %v, got %v", s.Drops, drops)
			}
		})
	}
}

// NATS down when the gateway starts and through a burst of requests to many models: Emit answers at once and never
// panics, the buffer holds at most MaxBuffered models (the newest request of each) and memory stays flat; what was
// kept is published once the server is back.
func TestDownAtStartBoundedAndFlushed(t *testing.T) {
	h := server(t)
	h.call(t, "POST", "/reset", nil)
	h.call(t, "POST", "/down", nil)
	var overflow sync.Map
	e, err := Open(h.url, Options{
		Credentials: Credentials{NKeySeedFile: h.seed}, Source: "bounded", MaxBuffered: 50,
		OnDrop: func(r Request, why DropReason) { overflow.Store(string(why), true) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(time.Second)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	started := time.Now()
	// Every other request for one hot model (coalesced, never dropped), the rest across 500 cold ones.
	for i := range 20_000 {
		model := "hot"
		if i%2 == 1 {
			model = fmt.Sprintf("m%d", i%500)
		}
		if out := e.Emit(Request{Namespace: "team-b", Model: model}); out != Buffered {
			t.Fatalf("emit %d: %s", i, out)
		}
	}
	if took := time.Since(started); took > 10*time.Second {
		t.Fatalf("20,000 emits took %v", took)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 4<<20 {
		t.Fatalf("heap grew %d bytes for 50 buffered models", grown)
	}
	if st := e.Stats(); st.Pending != 50 || st.Coalesced == 0 {
		t.Fatalf("stats %+v", st)
	}
	if _, ok := overflow.Load("overflow"); !ok {
		t.Fatal("no overflow reported")
	}
	if out := e.Emit(Request{Namespace: "Bad Namespace", Model: "m"}); out != Invalid {
		t.Fatalf("bad name: %s", out)
	}
	h.call(t, "POST", "/up", nil)
	waitConnected(t, e)
	deadline := time.Now().Add(20 * time.Second)
	// A batch being published is neither pending nor flushed yet: wait for the flushed count.
	for st := e.Stats(); (st.Pending > 0 || st.Flushed < 50) && time.Now().Before(deadline); st = e.Stats() {
		time.Sleep(100 * time.Millisecond)
	}
	if st := e.Stats(); st.Pending != 0 || st.Flushed != 50 {
		t.Fatalf("after the restart: %+v", st)
	}
	var models []string
	for _, r := range h.settle(t, 50) {
		models = append(models, r.Event["data"].(map[string]any)["model"].(string))
	}
	sort.Strings(models)
	// The 50 models requested last, each once: the hot one and the 49 last cold ones (m499, m497, ...).
	want := []string{"hot"}
	for k := range 49 {
		want = append(want, fmt.Sprintf("m%d", 499-2*k))
	}
	sort.Strings(want)
	if strings.Join(models, ",") != strings.Join(want, ",") {
		t.Fatalf("published %v", models)
	}
}

func TestPlaceholderSeedIsNamedAtStart(t *testing.T) {
	seed := filepath.Join(t.TempDir(), "placeholder.nk")
	if err := os.WriteFile(seed, []byte("REPLACE-ME"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open("nats://gateway@127.0.0.1:4222", Options{Credentials: Credentials{NKeySeedFile: seed}})
	if err == nil || !strings.Contains(err.Error(), "holds no user seed") {
		t.Fatalf("want the seed file named, got %v", err)
	}
}
