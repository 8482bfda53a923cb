package audit

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

// BenchmarkLog measures Log.
//
// caller/*: the caller's side only (the writer is not running and the queue
// is emptied in place), i.e. the cost the packet path pays per event.
// sustained/*: with the writer marshalling, chaining (with a key) and
// writing to io.Discard; with a bounded queue this is the writer's
// throughput, and allocs/op includes the writer's.
func BenchmarkLog(b *testing.B) {
	allow := Event(allEvents[2])
	deny := Event(denyFlow(1))
	distinct := make([]Event, 1000)
	for i := range distinct {
		distinct[i] = Flow{Action: "deny", Proto: "tcp", Src: "10.0.2.100:1", Dst: fmt.Sprintf("203.0.113.%d:%d", i%250, i), Rule: "default"}
	}

	callerWith := func(b *testing.B, opts Options, next func(i int) Event) {
		l := newLogger(opts)
		l.pending = make([]item, 0, 1<<12)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			l.Log(next(i))
			i++
			if len(l.pending) == cap(l.pending) {
				clear(l.pending)
				l.pending = l.pending[:0]
			}
		}
	}
	caller := func(b *testing.B, next func(i int) Event) {
		callerWith(b, Options{QueueLen: 1 << 12}, next)
	}
	// allow: the same allowed flow millions of times a second, a flood:
	// past the window's burst it is keyed and folded. allow-in-burst: an
	// ordinary run's rate, where each allowed flow is written as it comes.
	b.Run("caller/allow", func(b *testing.B) { caller(b, func(int) Event { return allow }) })
	b.Run("caller/allow-in-burst", func(b *testing.B) {
		callerWith(b, Options{QueueLen: 1 << 12, Burst: 1 << 62}, func(int) Event { return allow })
	})
	b.Run("caller/deny-repeated", func(b *testing.B) { caller(b, func(int) Event { return deny }) })
	b.Run("caller/deny-distinct", func(b *testing.B) {
		caller(b, func(i int) Event { return distinct[i%len(distinct)] })
	})

	b.Run("sustained/allow", func(b *testing.B) {
		l := startMem(Options{Key: testKey}, io.Discard)
		b.ReportAllocs()
		for b.Loop() {
			l.Log(allow)
		}
		l.Close()
	})
	b.Run("sustained/allow-parallel", func(b *testing.B) {
		l := startMem(Options{Key: testKey}, io.Discard)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Log(allow)
			}
		})
		l.Close()
	})
}

// BenchmarkVerify measures verifying a keyed log.
func BenchmarkVerify(b *testing.B) {
	log := sampleLog(b, len(allEvents), testKey)
	b.SetBytes(int64(len(log)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Verify(bytes.NewReader(log), testKey); err != nil {
			b.Fatal(err)
		}
	}
}
