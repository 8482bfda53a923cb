package intercept

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/nsgate/nsgate/policy"
)

// The body types a server may read _method fields from.
const (
	formURLEncoded = "application/x-www-form-urlencoded"
	formMultipart  = "multipart/form-data"
	formJSON       = "json"
)

// bodyForm is one way a server may read a request body's fields: its kind
// (formURLEncoded, formMultipart or formJSON) and, for a multipart body,
// its boundary.
type bodyForm struct {
	kind     string
	boundary string
}

// formsOf returns every way a server that honours _method may read the
// body of a request with this method and these Content-Type values, as
// leniently as the most lenient of them:
//   - the media type is what comes before the first ';', ',' (Rack) or
//     space (PHP), any case, whatever the parameters look like, so a
//     malformed "...urlencoded; charset" or "...urlencoded x" is still a
//     form;
//   - a POST without a Content-Type, or with an empty one, is read as a
//     urlencoded form (Rack);
//   - multipart/mixed and multipart/related are read like
//     multipart/form-data (Rack);
//   - a Content-Type holding "/json" or "+json" anywhere is a JSON body
//     whose top-level _method a server may read (Laravel);
//   - parsers differ on a multipart boundary the header spells oddly (PHP
//     takes the first "boundary" even inside another parameter, Rack the
//     last, PHP keeps the spaces and quotes Go drops), so a multipart
//     Content-Type must name one boundary, plainly (strictBoundary), and
//     its body must parse whole (multipartOverrides);
//   - with more than one Content-Type value, each is read, and the values
//     joined too.
//
// An error refuses the request: a multipart Content-Type whose boundary
// parsers could read differently.
func formsOf(method string, cts []string) ([]bodyForm, error) {
	if len(cts) == 0 {
		cts = []string{""}
	} else if len(cts) > 1 {
		cts = append(slices.Clone(cts), strings.Join(cts, ", "))
	}
	var out []bodyForm
	for _, ct := range cts {
		f, err := formOf(method, ct)
		if err != nil {
			return nil, err
		}
		if f.kind != "" {
			out = append(out, f)
		}
	}
	return out, nil
}

// formOf is formsOf for one Content-Type value; a zero bodyForm when the
// body is not one a server reads _method from.
func formOf(method, ct string) (bodyForm, error) {
	mt := strings.TrimLeft(ct, " \t")
	if i := strings.IndexAny(mt, ";, \t"); i >= 0 {
		mt = mt[:i] // PHP stops at a space too
	}
	mt = strings.ToLower(mt)
	lct := strings.ToLower(ct)
	switch {
	case mt == "" && method == http.MethodPost, mt == formURLEncoded:
		return bodyForm{kind: formURLEncoded}, nil
	case mt == formMultipart || mt == "multipart/mixed" || mt == "multipart/related":
		b, err := strictBoundary(ct)
		if err != nil {
			return bodyForm{}, errors.New("a multipart body is not forwarded where nsgate reads its _method fields when " + err.Error())
		}
		return bodyForm{kind: formMultipart, boundary: b}, nil
	case strings.Contains(lct, "/json") || strings.Contains(lct, "+json"):
		return bodyForm{kind: formJSON}, nil
	}
	return bodyForm{}, nil
}

// strictBoundary returns ct's boundary when every parser reads the same
// one: the strict parse's, named by the first "boundary" in ct in any case
// (PHP takes the first, even inside another parameter's name or value)
// and spelled "boundary" there unless no other spelling of it is in ct
// (PHP looks for the lower-case word first), the only "boundary=" in ct
// (Rack's greedy match takes the last), and its value following at once,
// bare or in quotes (PHP keeps the spaces and quotes Go drops), made of
// letters, digits and '()+_-./:=?' only (1 to 70 of them, RFC 2046's
// characters without the space and the comma). A value that holds the
// word itself (WebKit's "----WebKitFormBoundary...", Jersey's
// "Boundary_1_...") is fine: it comes after the name.
func strictBoundary(ct string) (string, error) {
	_, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", errors.New("its Content-Type does not parse: " + err.Error())
	}
	b := params["boundary"]
	if b == "" || len(b) > 70 || strings.IndexFunc(b, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("'()+_-./:=?", r))
	}) >= 0 {
		return "", errors.New("its boundary is empty, longer than 70 bytes or holds bytes other than letters, digits and '()+_-./:=?'")
	}
	lct := strings.ToLower(ct)
	first := strings.Index(lct, "boundary")
	name := ct[first : first+len("boundary")]
	before := strings.TrimRight(ct[:first], " \t")
	rest := ct[first+len("boundary"):]
	switch {
	case !strings.HasSuffix(before, ";"):
		return "", errors.New("the first \"boundary\" in its Content-Type is not the parameter's name")
	case name != "boundary" && strings.Contains(ct, "boundary"):
		return "", errors.New("its Content-Type spells the boundary parameter " + strconv.Quote(name) + " and holds \"boundary\" elsewhere")
	case strings.Count(lct, "boundary=") != 1:
		return "", errors.New("its Content-Type holds \"boundary=\" more than once")
	case !strings.HasPrefix(rest, "="+b) && !strings.HasPrefix(rest, `="`+b+`"`):
		return "", errors.New("its boundary does not follow \"boundary=\" at once")
	}
	return b, nil
}

// overrides returns the values of the _method fields (MethodOverrideField's
// names) that a server reading body as f finds: urlencoded fields ('&' and
// ';' separate them), multipart parts named so by their
// Content-Disposition (of any type) or, lacking a name, by their
// Content-ID (Rack), and a JSON body's top-level string members. body may
// be the first part of a longer one (whole false): a form's part is parsed
// leniently; JSON cannot be, so a held part of JSON yields "" (which no
// rule allows) when it spells the field name in any way the scanner for
// the rest would refuse.
func (f bodyForm) overrides(body []byte, whole bool) []string {
	var out []string
	switch f.kind {
	case formURLEncoded:
		for _, kv := range bytes.FieldsFunc(body, func(r rune) bool { return r == '&' || r == ';' }) {
			k, v, _ := strings.Cut(string(kv), "=")
			if uk, err := url.QueryUnescape(k); err == nil {
				k = uk
			}
			if !policy.MethodOverrideField(k) {
				continue
			}
			if uv, err := url.QueryUnescape(v); err == nil {
				v = uv
			}
			out = append(out, v)
		}
	case formMultipart:
		vals, err := multipartOverrides(body, f.boundary, whole)
		if err != nil {
			// A body the parse gives up on may still be read by a
			// lenient server: refused (no rule allows "").
			return append(vals, "")
		}
		out = vals
	case formJSON:
		if !whole {
			if jsonFieldScanner().find(body) != nil {
				out = append(out, "")
			}
			return out
		}
		out = jsonOverrides(body)
	}
	return out
}

// multipartOverrides returns the _method parts' values in body, parsed
// with boundary. It fails on a body a lenient server could read otherwise
// than the strict parse: one that does not open with its first boundary
// (Rack skips what comes before) or holds it elsewhere than after a CRLF, a part whose headers do not parse (PHP
// and Rack read on past a line without a colon) or whose
// Content-Disposition does not (a repeated name: PHP and Rack take the
// last), and, for a whole body (whole), one that does not end with the
// closing boundary.
func multipartOverrides(body []byte, boundary string, whole bool) ([]string, error) {
	delim := []byte("--" + boundary)
	if !bytes.HasPrefix(body, delim) {
		return nil, errors.New("the body does not open with its boundary")
	}
	// Every later delimiter on a line of its own after a CRLF: PHP ends a
	// part at a bare LF before the delimiter, Rack at the delimiter
	// anywhere, where Go's parser reads on inside the part.
	for i := len(delim); ; {
		j := bytes.Index(body[i:], delim)
		if j < 0 {
			break
		}
		if i += j; !bytes.HasSuffix(body[:i], []byte("\r\n")) {
			return nil, errors.New("the body holds its boundary other than after a CRLF")
		}
		i += len(delim)
	}
	var out []string
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			if !whole && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
				return out, nil // the held part ends inside a part
			}
			return out, err
		}
		// Rack finds a Content-Disposition or Content-ID anywhere in the
		// part's head, also inside another header's value.
		for _, vs := range p.Header {
			for _, v := range vs {
				if lv := strings.ToLower(v); strings.Contains(lv, "content-disposition") || strings.Contains(lv, "content-id") {
					return out, errors.New("a part header's value names another header")
				}
			}
		}
		name := ""
		if cd := p.Header.Get("Content-Disposition"); cd != "" {
			// Go lets RFC 2231's name* win over name; PHP ignores it.
			for _, kv := range strings.Split(cd, ";")[1:] {
				if k, _, _ := strings.Cut(kv, "="); strings.EqualFold(strings.TrimSpace(k), "name*") {
					return out, errors.New("a part named with name*")
				}
			}
			_, params, err := mime.ParseMediaType(cd)
			if err != nil {
				return out, err
			}
			// PHP reads single quotes as quotes too.
			name = strings.Trim(params["name"], `'"`)
		}
		if name == "" {
			name = strings.Trim(strings.TrimSpace(p.Header.Get("Content-Id")), "<>")
		}
		if policy.MethodOverrideField(name) {
			v, _ := io.ReadAll(io.LimitReader(p, 64))
			out = append(out, string(v))
		}
		p.Close()
	}
}

// jsonOverrides returns the string values of a JSON object's top-level
// _method members (all of them: a parser keeps the first or the last); nil
// for a body that is not a JSON object, which no server reads fields from.
func jsonOverrides(body []byte) []string {
	d := json.NewDecoder(bytes.NewReader(body))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var out []string
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return out
		}
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return out
		}
		if k, _ := t.(string); policy.MethodOverrideField(k) {
			var s string
			if json.Unmarshal(v, &s) == nil {
				out = append(out, s)
			}
		}
	}
	return out
}

// unpct returns b with its %XX escapes decoded (twice over, for a double
// encoding), leniently: a % not followed by two hex digits stays. nil when
// b holds no %.
func unpct(b []byte) []byte {
	if bytes.IndexByte(b, '%') < 0 {
		return nil
	}
	out := b
	for range 2 {
		if bytes.IndexByte(out, '%') < 0 {
			break
		}
		next := make([]byte, 0, len(out))
		for i := 0; i < len(out); i++ {
			if out[i] == '%' && i+2 < len(out) && ishex(out[i+1]) && ishex(out[i+2]) {
				next = append(next, unhex(out[i+1])<<4|unhex(out[i+2]))
				i += 2
				continue
			}
			next = append(next, out[i])
		}
		out = next
	}
	return out
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
