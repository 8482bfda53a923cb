package audit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Filter selects records for `nsgate audit show`. A zero field matches
// everything.
type Filter struct {
	Event  string    // the record's event ("flow", "dns", ...)
	Action string    // "allow", "deny", ...
	Since  time.Time // records at or after this time
}

// Match reports whether r passes the filter.
func (f Filter) Match(r Record) bool {
	return (f.Event == "" || r.Name == f.Event) &&
		(f.Action == "" || r.Action() == f.Action) &&
		(f.Since.IsZero() || !r.Time.Before(f.Since))
}

// ShowLine renders r as one line for a person: local time, seq, and the
// event as the human denial lines write it (worker-supplied strings are
// quoted, so a hostile name cannot forge a line).
//
//	11:25:50.123  #3  deny tcp 10.0.2.100:53910 -> 169.254.169.254:80 rule=builtin:metadata: …
func ShowLine(r Record) string {
	var body string
	switch {
	case r.Event == nil:
		body = word(r.Name) + " (an event this version does not know)"
	default:
		body = humanBody(r.Event)
		if n := r.Count(); n > 0 {
			body += " (" + strconv.FormatUint(n, 10) + " more like this)"
		}
	}
	return r.Time.Local().Format("2006-01-02 15:04:05.000") + "  #" + strconv.FormatUint(r.Seq, 10) + "  " + body
}

// Show writes the records of r that pass f, one line each (ShowLine). It
// stops at the first line that is not a record, with that error.
func Show(w io.Writer, r io.Reader, f Filter) error {
	rd := NewReader(r)
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if f.Match(rec) {
			bw.WriteString(ShowLine(rec) + "\n")
		}
	}
}

// Follow is Show of the file at path that keeps reading as the file grows,
// as `tail -f` does, until ctx is done. A line is shown once it is whole.
// A file that shrinks (truncated or replaced) ends it with an error.
func Follow(ctx context.Context, w io.Writer, path string, f Filter, poll time.Duration) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	var (
		partial []byte
		off     int64
		line    int
		buf     = make([]byte, 64<<10)
		// What one read brings is shown with one write (a system call
		// per record made a long log slow to follow).
		bw = bufio.NewWriterSize(w, 64<<10)
	)
	defer bw.Flush()
	for {
		n, rerr := file.Read(buf)
		if n > 0 {
			off += int64(n)
			partial = append(partial, buf[:n]...)
			start := 0
			for {
				i := bytes.IndexByte(partial[start:], '\n')
				if i < 0 {
					break
				}
				line++
				l := partial[start : start+i]
				start += i + 1
				if len(l) > 0 {
					rec, err := ParseRecord(l)
					if err != nil {
						return &LineError{Line: line, Err: err}
					}
					if f.Match(rec) {
						bw.WriteString(ShowLine(rec) + "\n")
					}
				}
			}
			partial = append(partial[:0], partial[start:]...)
			if len(partial) > maxRecordLine {
				return &LineError{Line: line + 1, Err: errors.New("line too long")}
			}
			if err := bw.Flush(); err != nil {
				return err
			}
			continue
		}
		if rerr != nil && rerr != io.EOF {
			return rerr
		}
		if st, err := file.Stat(); err == nil && st.Size() < off {
			return fmt.Errorf("%s shrank from %d to %d bytes (truncated or replaced)", path, off, st.Size())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(poll):
		}
	}
}

// Stats are a log's totals, by event and action, destination, rule and
// name, for `nsgate audit stats`. Folded records count as the events they
// stand for.
type Stats struct {
	Records, Events int
	Runs            int
	First, Last     time.Time
	ByEvent         map[string]uint64 // "flow deny", "dns allow", ...
	Dests           map[string]*Tally // flows by destination (name:port, else address:port)
	Rules           map[string]uint64 // denials by rule
	DeniedNames     map[string]uint64 // dns denials by name
	DeniedExecs     map[string]uint64 // exec denials by path (not the $PATH misses)
	L7Reasons       map[string]uint64 // l7 denials by reason
	BytesOut        int64
	BytesIn         int64
}

// Tally counts allowed and denied events.
type Tally struct{ Allow, Deny uint64 }

// ReadStats reads every record of r into Stats.
func ReadStats(r io.Reader) (*Stats, error) {
	s := &Stats{ByEvent: map[string]uint64{}, Dests: map[string]*Tally{}, Rules: map[string]uint64{},
		DeniedNames: map[string]uint64{}, DeniedExecs: map[string]uint64{}, L7Reasons: map[string]uint64{}}
	rd := NewReader(r)
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return s, nil
		}
		if err != nil {
			return s, err
		}
		s.add(rec)
	}
}

func (s *Stats) add(r Record) {
	n := max(1, r.Count()) // a folded record stands for Count events
	s.Records++
	s.Events += int(n)
	if s.First.IsZero() {
		s.First = r.Time
	}
	s.Last = r.Time
	key := r.Name
	if a := r.Action(); a != "" {
		key += " " + a
	}
	s.ByEvent[key] += n
	deny := r.Action() == "deny"
	if deny && r.Rule() != "" {
		s.Rules[r.Rule()] += n
	}
	switch e := r.Event.(type) {
	case Start:
		s.Runs++
	case Flow:
		dst := e.Dst
		if e.Host != "" {
			if _, port, ok := strings.Cut(e.Dst[strings.LastIndexByte(e.Dst, ']')+1:], ":"); ok {
				dst = e.Host + ":" + port
			}
		}
		t := s.Dests[e.Proto+" "+dst]
		if t == nil {
			t = &Tally{}
			s.Dests[e.Proto+" "+dst] = t
		}
		if deny {
			t.Deny += n
		} else {
			t.Allow += n
		}
	case DNS:
		if deny {
			s.DeniedNames[e.QName] += n
		}
	case Exec:
		if deny && !e.Missing {
			s.DeniedExecs[e.Path] += n
		}
	case L7:
		if deny {
			s.L7Reasons[e.Reason] += n
		}
	case FlowEnd:
		s.BytesOut += e.BytesOut
		s.BytesIn += e.BytesIn
	}
}

// statsTop bounds each of Stats' listings.
const statsTop = 20

// Write renders s as plain-text tables.
func (s *Stats) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "%d records standing for %d events in %d run(s)", s.Records, s.Events, s.Runs)
	if !s.First.IsZero() {
		fmt.Fprintf(tw, ", %s to %s", s.First.Local().Format("2006-01-02 15:04:05"), s.Last.Local().Format("2006-01-02 15:04:05"))
	}
	fmt.Fprintf(tw, "\nbytes relayed: %d out, %d in\n", s.BytesOut, s.BytesIn)

	section(tw, "By event", "EVENT\tCOUNT", sortedCounts(s.ByEvent, 0, true))
	var dests []string
	keys := make([]string, 0, len(s.Dests))
	for k := range s.Dests {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := s.Dests[keys[i]], s.Dests[keys[j]]
		if a.Allow+a.Deny != b.Allow+b.Deny {
			return a.Allow+a.Deny > b.Allow+b.Deny
		}
		return keys[i] < keys[j]
	})
	for i, k := range keys {
		if i == statsTop {
			dests = append(dests, fmt.Sprintf("(%d more)\t\t", len(keys)-statsTop))
			break
		}
		proto, dst, _ := strings.Cut(k, " ")
		dests = append(dests, fmt.Sprintf("%s %s\t%d\t%d", word(proto), word(dst), s.Dests[k].Allow, s.Dests[k].Deny))
	}
	section(tw, "Flows by destination", "DESTINATION\tALLOWED\tDENIED", dests)
	section(tw, "Denials by rule", "RULE\tCOUNT", sortedCounts(s.Rules, statsTop, false))
	section(tw, "Denied names", "NAME\tCOUNT", sortedCounts(s.DeniedNames, statsTop, false))
	section(tw, "Denied programs", "PATH\tCOUNT", sortedCounts(s.DeniedExecs, statsTop, false))
	section(tw, "L7 refusals", "REASON\tCOUNT", sortedCounts(s.L7Reasons, statsTop, false))
	return tw.Flush()
}

func section(w io.Writer, title, header string, rows []string) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s\n%s\n", title, header)
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
}

// sortedCounts renders m as "key\tcount" rows, largest first, at most top
// rows (0: all) and a "(N more)" row. Keys are quoted where they hold
// anything but printable text (they come from the log); with words, each
// space-separated word of a key is quoted on its own.
func sortedCounts(m map[string]uint64, top int, words bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var rows []string
	for i, k := range keys {
		if top > 0 && i == top {
			rows = append(rows, fmt.Sprintf("(%d more)\t", len(keys)-top))
			break
		}
		key := word(k)
		if words {
			parts := strings.Fields(k)
			for i := range parts {
				parts[i] = word(parts[i])
			}
			key = strings.Join(parts, " ")
		}
		rows = append(rows, fmt.Sprintf("%s\t%d", key, m[k]))
	}
	return rows
}
