// Package hoptrace records when a packet or a relayed chunk passes each
// hop of nsgate's data path, for the latency measurements in
// docs/performance.md. With NSGATE_HOPTRACE=FILE in nsgate's environment
// every Mark appends (hop, monotonic time) to a fixed ring; Dump writes,
// for each pair of consecutive hops, how often it occurred and the median
// and 90th percentile of the time between them. Measure one flow at a
// time (the benchmark's kept-alive latency run): the ring does not tell
// flows apart. Off (the default), Mark is one load of a bool.
package hoptrace

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Hop names one point on the data path.
type Hop uint8

// The hops, in the order a request and its response pass them.
const (
	TunRead       Hop = iota + 1 // tun.Endpoint's readv returned a packet from the worker
	RelayFromWork                // the relay's Read from the worker's endpoint returned data
	UpWritten                    // the relay's write to the host socket returned
	RelayFromUp                  // the relay's Read from the host socket returned data
	WorkWritten                  // the relay's write into the worker's endpoint returned
	TunWritten                   // tun.Endpoint's writev of a packet to the worker returned
	Filtered                     // the L7 filter (relay.Filter.Next) judged the worker's bytes
	Admitting                    // a new TCP flow's handler started (its SYN was forwarded)
	Dialed                       // the flow's upstream dial returned
	Accepted                     // the worker's handshake was answered (the SYN-ACK queued)
	numHops
)

var names = [numHops]string{"", "tun-read", "relay-read-worker", "upstream-written", "relay-read-upstream", "worker-written", "tun-written", "l7-filtered", "admitting", "dialed", "accepted"}

func (h Hop) String() string {
	if h < numHops {
		return names[h]
	}
	return fmt.Sprintf("hop%d", h)
}

const ringSize = 1 << 16

type event struct {
	hop Hop
	t   int64 // ns since start
}

var (
	// On is set once at start-up (NSGATE_HOPTRACE); read without a lock.
	On    bool
	path  string
	start = time.Now()
	next  atomic.Uint64
	ring  [ringSize]event
	mu    sync.Mutex // serialises Dump
)

func init() {
	path = os.Getenv("NSGATE_HOPTRACE")
	os.Unsetenv("NSGATE_HOPTRACE")
	On = path != ""
}

// Mark records that hop was passed now. Only the first ringSize marks
// are kept.
func Mark(h Hop) {
	if !On {
		return
	}
	i := next.Add(1) - 1
	if i >= ringSize {
		return
	}
	ring[i] = event{hop: h, t: int64(time.Since(start))}
}

// Flush appends the table to NSGATE_HOPTRACE's file, if it was set.
func Flush() {
	if !On {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644) // one table per run, appended
	if err != nil {
		fmt.Fprintf(os.Stderr, "nsgate: NSGATE_HOPTRACE: %v\n", err)
		return
	}
	Dump(f)
	f.Close()
}

// Dump writes the table of the gaps between consecutive hops.
func Dump(w io.Writer) {
	mu.Lock()
	defer mu.Unlock()
	n := min(next.Load(), ringSize)
	ev := slices.Clone(ring[:n])
	// Concurrent marks may land out of order in the ring.
	slices.SortStableFunc(ev, func(a, b event) int { return int(a.t - b.t) })
	gaps := map[[2]Hop][]int64{}
	for i := 1; i < len(ev); i++ {
		if ev[i].hop == 0 || ev[i-1].hop == 0 {
			continue
		}
		k := [2]Hop{ev[i-1].hop, ev[i].hop}
		gaps[k] = append(gaps[k], ev[i].t-ev[i-1].t)
	}
	keys := make([][2]Hop, 0, len(gaps))
	for k := range gaps {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]Hop) int { return len(gaps[b]) - len(gaps[a]) })
	fmt.Fprintf(w, "%d marks\n%-22s %-22s %8s %10s %10s\n", n, "from", "to", "count", "p50_us", "p90_us")
	for _, k := range keys {
		g := gaps[k]
		slices.Sort(g)
		fmt.Fprintf(w, "%-22s %-22s %8d %10.1f %10.1f\n", k[0], k[1], len(g),
			float64(g[len(g)/2])/1e3, float64(g[len(g)*9/10])/1e3)
	}
}
