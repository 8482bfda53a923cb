package audit

// Tee returns a Sink that logs every event to s and then hands it to
// observe, as it comes: before s folds repeated events into aggregates,
// so observe sees each event once, with all its fields, whether or not a
// record of its own is written. It is how a program watches a run's
// decisions in process (nsgate run --learn) without reading the log back.
//
// observe is called on the goroutine that logged the event, from many
// goroutines at once; it must be safe for concurrent use and must not
// block (the gateway waits for it). It receives the event as given to
// Log (a value or a pointer of this package's types). The Sink returned
// fails when s fails (Failer): the gateway, DNS and the exec audit stop as
// they would with s itself.
func Tee(s Sink, observe func(Event)) Sink {
	if observe == nil {
		return s
	}
	return &tee{s: s, observe: observe}
}

type tee struct {
	s       Sink
	observe func(Event)
}

func (t *tee) Log(ev Event) uint64 {
	seq := t.s.Log(ev)
	if ev != nil {
		t.observe(ev)
	}
	return seq
}

// Failed is s's Failed, or nil (never ready) when s cannot fail.
func (t *tee) Failed() <-chan struct{} { return FailedOf(t.s) }

// Full is s's Full, or nil (never ready) when s cannot run short of room.
func (t *tee) Full() <-chan struct{} { return FullOf(t.s) }
