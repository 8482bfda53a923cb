package policy

import (
	"strconv"
	"strings"
)

// Error is one problem found in a policy file, located at the YAML node that
// caused it. Line and Col are 1-based; Col is 1 when the YAML library reports
// only a line.
type Error struct {
	File string
	Line int
	Col  int
	Msg  string
}

// Error formats e as "FILE:LINE:COL: msg".
func (e Error) Error() string {
	return e.File + ":" + strconv.Itoa(e.Line) + ":" + strconv.Itoa(e.Col) + ": " + e.Msg
}

// Errors is every problem Parse found, in file order. Parse returns it as a
// *Errors; errors.As works with a target of type *Errors, Errors or Error
// (the first problem).
type Errors []Error

// Error returns one Error per line, without a trailing newline.
func (e Errors) Error() string {
	var b strings.Builder
	for i, x := range e {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(x.Error())
	}
	return b.String()
}

// Unwrap returns each problem as its own error.
func (e Errors) Unwrap() []error {
	out := make([]error, len(e))
	for i, x := range e {
		out[i] = x
	}
	return out
}

// As lets errors.As fill a target of type *Errors from a *Errors.
func (e *Errors) As(target any) bool {
	if t, ok := target.(*Errors); ok && e != nil {
		*t = *e
		return true
	}
	return false
}

// compareErrors orders problems by position in the file.
func compareErrors(a, b Error) int {
	if a.Line != b.Line {
		return a.Line - b.Line
	}
	return a.Col - b.Col
}
