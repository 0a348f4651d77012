package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"

	"github.com/zukhruf/lease/internal/lockset/history"
)

// register is the guarded resource, owned by the harness and outside the
// faults: per lock, a value kept twice, unfenced (every write applied) and
// fenced (a write whose token is below the highest it accepted is
// refused). It stamps each write's outcome in the history as it applies
// it: ok when the fenced register accepted it, fail when it refused it.
type register struct {
	mu       sync.Mutex
	out      *history.Writer
	unfenced map[string]int64
	fenced   map[string]int64
	highest  map[string]int64
}

type readReply struct {
	Value int64 `json:"value"`
}

func newRegister(out *history.Writer) *register {
	return &register{out: out, unfenced: map[string]int64{}, fenced: map[string]int64{}, highest: map[string]int64{}}
}

func (r *register) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	lock := q.Get("lock")
	switch req.URL.Path {
	case "/read":
		r.mu.Lock()
		v := r.unfenced[lock]
		r.mu.Unlock()
		json.NewEncoder(w).Encode(readReply{Value: v})
	case "/write":
		token, err1 := strconv.ParseInt(q.Get("token"), 10, 64)
		value, err2 := strconv.ParseInt(q.Get("value"), 10, 64)
		if err1 != nil || err2 != nil || lock == "" || q.Get("p") == "" {
			http.Error(w, "bad write", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.unfenced[lock] = value
		typ := history.Fail
		if h, ok := r.highest[lock]; !ok || token >= h {
			r.highest[lock], r.fenced[lock] = token, value
			typ = history.OK
		}
		r.out.Write(history.Event{T: history.Now(), P: q.Get("p"), Lock: lock, F: history.Write, Type: typ, Token: token, Value: value})
		r.mu.Unlock()
		if typ == history.Fail {
			http.Error(w, "refused: a stale token", http.StatusConflict)
		}
	default:
		http.NotFound(w, req)
	}
}
