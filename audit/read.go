package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Record is one record of an audit log as read back: the members every
// record carries (docs/audit.md) and its payload, decoded into the Event type the
// Logger wrote it from. Reading does not check the hash chain or the MACs
// (Verify and Check do).
type Record struct {
	Seq  uint64
	Time time.Time
	// Name is the record's "event" member: "flow", "dns", ...
	Name string
	// Event is the payload as a value of its type (Flow, DNS, FlowEnd,
	// ...; never a pointer), or nil when Name is not an event this
	// version of nsgate writes.
	Event Event
	// Prev and MAC are the chain members as written (MAC is empty in a
	// log written without a key).
	Prev, MAC string
	// Raw is the record's line as written, without its newline. It is the
	// record's own copy.
	Raw json.RawMessage
}

// Action is the record's action ("allow", "deny", "refused", ...), or ""
// for events without one.
func (r Record) Action() string { return actionOf(r.Event) }

// Count is the number of further events an aggregate record stands for
// (0 for a record that stands for itself).
func (r Record) Count() uint64 { return countOf(r.Event) }

// Rule is the policy rule a flow or DNS record names, or "".
func (r Record) Rule() string {
	switch e := r.Event.(type) {
	case Flow:
		return e.Rule
	case DNS:
		return e.Rule
	}
	return ""
}

// FlowSeq is the seq of the flow record that a flow_end or l7 record
// belongs to, or that an aggregate of allowed flows stands for; else 0.
func (r Record) FlowSeq() uint64 {
	switch e := r.Event.(type) {
	case Flow:
		return e.FlowSeq
	case FlowEnd:
		return e.FlowSeq
	case L7:
		return e.FlowSeq
	}
	return 0
}

// maxRecordLine bounds one line the Reader accepts. The Logger clips what
// the worker controls, so its records are far shorter.
const maxRecordLine = 4 << 20

// LineError is the error for a line that is not an audit record: torn
// (a crash in the middle of a write), not JSON, or without the members
// every record has. Line counts from 1.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("audit line %d: %v", e.Line, e.Err) }

func (e *LineError) Unwrap() error { return e.Err }

// Reader reads the records of a JSON-lines audit log one at a time. Blank
// lines are skipped. It is not safe for concurrent use.
type Reader struct {
	sc   *bufio.Scanner
	line int
}

// NewReader returns a Reader of r. It reads r in blocks; it does not
// close it.
func NewReader(r io.Reader) *Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxRecordLine)
	return &Reader{sc: sc}
}

// Next returns the next record; io.EOF after the last. A line that is not
// a record gives a *LineError naming it, and reading may go on past it;
// a line longer than 4 MiB ends the reading (every later call returns the
// same error).
func (rd *Reader) Next() (Record, error) {
	for rd.sc.Scan() {
		rd.line++
		b := rd.sc.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		rec, err := ParseRecord(b)
		if err != nil {
			return Record{}, &LineError{Line: rd.line, Err: err}
		}
		return rec, nil
	}
	if err := rd.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Record{}, &LineError{Line: rd.line + 1, Err: fmt.Errorf("longer than %d bytes", maxRecordLine)}
		}
		return Record{}, fmt.Errorf("read audit log: %w", err)
	}
	return Record{}, io.EOF
}

// ReadRecords reads every record of a JSON-lines audit log. On an error
// it returns the records before the bad line with the error.
func ReadRecords(r io.Reader) ([]Record, error) {
	rd := NewReader(r)
	var recs []Record
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return recs, nil
		}
		if err != nil {
			return recs, err
		}
		recs = append(recs, rec)
	}
}

// ReadRecordsFile is ReadRecords of the file at path.
func ReadRecordsFile(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadRecords(f)
}

// recordHead holds the members every record has.
type recordHead struct {
	Seq   *uint64    `json:"seq"`
	Time  *time.Time `json:"time"`
	Event *string    `json:"event"`
	Prev  string     `json:"prev"`
	MAC   string     `json:"mac"`
}

// ParseRecord decodes one record's line (without its newline). The
// payload is decoded from the same object: the members every record has
// are fields of no event type. Record.Raw is a copy of line.
func ParseRecord(line []byte) (Record, error) {
	var h recordHead
	if err := json.Unmarshal(line, &h); err != nil {
		return Record{}, err
	}
	switch {
	case h.Seq == nil:
		return Record{}, errors.New("no seq member")
	case h.Time == nil:
		return Record{}, errors.New("no time member")
	case h.Event == nil || *h.Event == "":
		return Record{}, errors.New("no event member")
	}
	rec := Record{Seq: *h.Seq, Time: *h.Time, Name: *h.Event, Prev: h.Prev, MAC: h.MAC}
	ev, err := decodeEvent(rec.Name, line)
	if err != nil {
		return Record{}, fmt.Errorf("%s record: %w", rec.Name, err)
	}
	rec.Event = ev
	rec.Raw = append(json.RawMessage(nil), line...)
	return rec, nil
}

// decodeEvent decodes line as the event named name; nil for a name no
// event type has.
func decodeEvent(name string, line []byte) (Event, error) {
	switch name {
	case Start{}.EventName():
		return decodeAs[Start](line)
	case DNS{}.EventName():
		return decodeAs[DNS](line)
	case Flow{}.EventName():
		return decodeAs[Flow](line)
	case FlowEnd{}.EventName():
		return decodeAs[FlowEnd](line)
	case L7{}.EventName():
		return decodeAs[L7](line)
	case Packet{}.EventName():
		return decodeAs[Packet](line)
	case Exec{}.EventName():
		return decodeAs[Exec](line)
	case Syscall{}.EventName():
		return decodeAs[Syscall](line)
	case Inbound{}.EventName():
		return decodeAs[Inbound](line)
	case Forward{}.EventName():
		return decodeAs[Forward](line)
	case InboundEnd{}.EventName():
		return decodeAs[InboundEnd](line)
	case Policy{}.EventName():
		return decodeAs[Policy](line)
	case Exit{}.EventName():
		return decodeAs[Exit](line)
	}
	return nil, nil
}

func decodeAs[T Event](line []byte) (Event, error) {
	var e T
	if err := json.Unmarshal(line, &e); err != nil {
		return nil, err
	}
	return e, nil
}
