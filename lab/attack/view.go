package attack

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/lab/internet"
	"github.com/nsgate/nsgate/learn"
	"github.com/nsgate/nsgate/policy"
)

// The operator's view: the worker chooses the strings that reach the
// operator (names, Host headers, paths it tries to run) and which
// refusals the log holds, and the operator reads them back through
// nsgate's denial lines, `audit show`, `audit stats` and `policy
// suggest`, whose output is a policy the operator may apply. These
// attempts are refused like any other; their host checks render the run's
// audit log as those commands do.

// hostileLabel is a DNS label or file name that carries terminal escapes
// (erase line and move up, OSC 52 clipboard write, a C1 CSI), a forged
// second line, a bidi override and an invisible printable rune.
const hostileLabel = "\x1b[2K\x1b[1A\x1b]52;c;cm0K\x07\u009b2J\nallow\u202e\ufe0f"

// viewAttempts are the attacks on the operator's view.
func viewAttempts() []Attempt {
	return []Attempt{
		{
			ID: "view-hostile-strings", Category: "containment", Layer: LayerExecGuard,
			Description: "put terminal escapes (OSC 52 clipboard write, cursor moves, a C1 CSI), a newline with a forged record, a bidi override and an invisible rune into the strings the operator reads: DNS names below " + internet.ExfilZone + ", an HTTP Host header, and the path of a program it tries to run",
			Expect:      Blocked, Audit: AuditDeny, Aims: []string{internet.TargetExfil, internet.TargetFronted},
			HostCheck: "every record of the run, as nsgate run's denial line, audit show's line and in audit stats, is one line of printable ASCII, and the suggestion policy suggest makes of the log holds no control, bidi or invisible character",
			run:       viewHostileStrings,
			CheckHost: func(h *HostEnv, at Attempt) HostResult { return h.viewPrintable() },
		},
		{
			ID: "view-exec-suggest-tree", Category: "containment", Layer: LayerExecGuard,
			Description: "try to run / (a directory: an exec.allow entry for it allows every file), the shell's directory spelled DIR/. and the dynamic loader itself, so that policy suggest proposes them as exec.allow entries",
			Expect:      Blocked, Audit: AuditDeny,
			HostCheck: "no exec.allow entry policy suggest makes of the run's log is a directory on the host, the root or a dynamic loader",
			run:       viewExecSuggestTree,
			CheckHost: func(h *HostEnv, at Attempt) HostResult { return h.viewSuggestNarrow() },
		},
	}
}

// suggestion is what `nsgate policy suggest` prints for the run's log.
func (h *HostEnv) suggestion() (string, error) {
	c := learn.NewCollector(learn.Denied)
	for _, r := range h.Records {
		c.AddRecord(r)
	}
	return learn.Suggestions(c.Result(nil), learn.SuggestInput{Log: h.AuditLog, Records: len(h.Records)})
}

// viewPrintable renders every record as the operator's commands do.
func (h *HostEnv) viewPrintable() HostResult {
	if len(h.Records) == 0 {
		return HostResult{Detail: "the lab read no audit records"}
	}
	bad := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] > 0x7e {
				return true
			}
		}
		return false
	}
	var log bytes.Buffer
	hostile := 0
	for _, r := range h.Records {
		for _, line := range []string{audit.FormatHuman(r.Event), audit.ShowLine(r)} {
			if bad(line) {
				return HostResult{Detail: fmt.Sprintf("record #%d renders as %q", r.Seq, line)}
			}
			if strings.Contains(line, `\x1b]52`) {
				hostile++
			}
		}
		log.Write(r.Raw)
		log.WriteByte('\n')
	}
	st, err := audit.ReadStats(&log)
	if err != nil {
		return HostResult{Detail: "audit stats: " + err.Error()}
	}
	var out bytes.Buffer
	st.Write(&out)
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if bad(strings.ReplaceAll(l, "\t", " ")) {
			return HostResult{Detail: fmt.Sprintf("audit stats prints %q", l)}
		}
	}
	sugg, err := h.suggestion()
	if err != nil {
		return HostResult{Detail: "policy suggest: " + err.Error()}
	}
	for _, l := range strings.Split(sugg, "\n") {
		if bad(l) {
			return HostResult{Detail: fmt.Sprintf("policy suggest prints %q", l)}
		}
	}
	if hostile == 0 {
		return HostResult{Detail: "no record carried the worker's escape sequence, so nothing was shown to check"}
	}
	return HostResult{OK: true, Detail: fmt.Sprintf("%d records rendered, %d lines carried the worker's escapes, every one quoted", len(h.Records), hostile)}
}

// viewSuggestNarrow checks the exec.allow entries policy suggest makes.
func (h *HostEnv) viewSuggestNarrow() HostResult {
	sugg, err := h.suggestion()
	if err != nil {
		return HostResult{Detail: "policy suggest: " + err.Error()}
	}
	p, err := policy.Parse("suggestion", []byte(sugg))
	if err != nil {
		return HostResult{Detail: "the suggestion does not parse: " + err.Error()}
	}
	for _, e := range p.ExecAllow() {
		// Entries in the worker's private /tmp or home need not exist
		// on the host; one that does must not be a directory.
		if st, err := os.Stat(e); err == nil && st.IsDir() {
			return HostResult{Detail: fmt.Sprintf("suggested exec.allow entry %q is a directory: it allows its whole tree", e)}
		}
		if b := filepath.Base(e); e == "/" || strings.HasPrefix(b, "ld-") || strings.HasPrefix(b, "ld.so") {
			return HostResult{Detail: fmt.Sprintf("suggested exec.allow entry %q is the root or a dynamic loader", e)}
		}
	}
	return HostResult{OK: true, Detail: fmt.Sprintf("the suggestion's exec.allow: %q", p.ExecAllow())}
}
