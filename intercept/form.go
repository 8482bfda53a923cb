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

// maxBoundaries bounds the boundaries a multipart Content-Type may name:
// the body is parsed once with each.
const maxBoundaries = 8

// bodyForm is one way a server may read a request body's fields: its kind
// (formURLEncoded, formMultipart or formJSON) and, for a multipart body,
// every boundary some server may take from the Content-Type.
type bodyForm struct {
	kind       string
	boundaries []string
}

// formsOf returns every way a server that honours _method may read the
// body of a request with this method and these Content-Type values, as
// leniently as the most lenient of them:
//   - the media type is what comes before the first ';' or ',', any case,
//     whatever the parameters look like (Rack), so a malformed
//     "...urlencoded; charset" is still a form;
//   - a POST without a Content-Type, or with an empty one, is read as a
//     urlencoded form (Rack);
//   - multipart/mixed and multipart/related are read like
//     multipart/form-data (Rack);
//   - a Content-Type holding "/json" or "+json" anywhere is a JSON body
//     whose top-level _method a server may read (Laravel);
//   - a multipart body's boundary is every one a parser may pick: the
//     strict parse's, and the value after each "boundary" in the header,
//     the first (PHP) and the last (Rack's greedy match) among them;
//   - with more than one Content-Type value, each is read, and the values
//     joined too.
//
// An error refuses the request: a multipart Content-Type naming more
// boundaries than nsgate parses the body with.
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
	mt := ct
	if i := strings.IndexAny(mt, ";,"); i >= 0 {
		mt = mt[:i]
	}
	mt = strings.ToLower(strings.TrimSpace(mt))
	lct := strings.ToLower(ct)
	switch {
	case mt == "" && method == http.MethodPost, mt == formURLEncoded:
		return bodyForm{kind: formURLEncoded}, nil
	case mt == formMultipart || mt == "multipart/mixed" || mt == "multipart/related":
		bs := boundaries(ct)
		if len(bs) > maxBoundaries {
			return bodyForm{}, errors.New("a multipart Content-Type naming more than " + strconv.Itoa(maxBoundaries) + " boundaries is not forwarded: its _method fields cannot all be judged")
		}
		return bodyForm{kind: formMultipart, boundaries: bs}, nil
	case strings.Contains(lct, "/json") || strings.Contains(lct, "+json"):
		return bodyForm{kind: formJSON}, nil
	}
	return bodyForm{}, nil
}

// boundaries returns every boundary a multipart parser may read from ct,
// without repeats: the strict parse's, then for each "boundary" (any case)
// the value after the '=' that follows it, quoted, or up to the next '"',
// ';' or ','; each also with the spaces around it trimmed.
func boundaries(ct string) []string {
	var out []string
	add := func(b string) {
		if b != "" && !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	if _, params, err := mime.ParseMediaType(ct); err == nil {
		add(params["boundary"])
	}
	lct := strings.ToLower(ct)
	for off := 0; ; {
		i := strings.Index(lct[off:], "boundary")
		if i < 0 {
			break
		}
		off += i + len("boundary")
		j := strings.IndexByte(ct[off:], '=')
		if j < 0 {
			break
		}
		v := ct[off+j+1:]
		if q := strings.TrimLeft(v, " \t"); strings.HasPrefix(q, `"`) {
			q = q[1:]
			if k := strings.IndexByte(q, '"'); k >= 0 {
				q = q[:k]
			}
			add(q)
			continue
		}
		if k := strings.IndexAny(v, `";,`); k >= 0 {
			v = v[:k]
		}
		add(v)
		add(strings.TrimSpace(v))
	}
	return out
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
		for _, b := range f.boundaries {
			out = append(out, multipartOverrides(body, b)...)
		}
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
// with boundary.
func multipartOverrides(body []byte, boundary string) []string {
	var out []string
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		p, err := mr.NextPart()
		if err != nil {
			return out
		}
		name := ""
		if cd := p.Header.Get("Content-Disposition"); cd != "" {
			if _, params, err := mime.ParseMediaType(cd); err == nil {
				name = params["name"]
			} else {
				name = looseParam(cd, "name")
			}
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

// looseParam finds parameter key's value in a header value a strict parse
// refused: after a ';', any case, quoted or up to the next ';'.
func looseParam(h, key string) string {
	for _, p := range strings.Split(h, ";")[1:] {
		k, v, ok := strings.Cut(p, "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), key) {
			v = strings.TrimSpace(v)
			if strings.HasPrefix(v, `"`) {
				v = v[1:]
				if i := strings.IndexByte(v, '"'); i >= 0 {
					v = v[:i]
				}
			}
			return v
		}
	}
	return ""
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
