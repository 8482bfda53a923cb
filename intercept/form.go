package intercept

import (
	"bytes"
	"mime"
	"mime/multipart"
	"net/url"
	"strings"
)

// formOverrides returns the values of a form body's _method fields (any
// case of the name), which Rails, Laravel and Symfony read as the
// request's method: application/x-www-form-urlencoded fields, or
// multipart/form-data parts of that name. body may be the first part of a
// longer one: what it holds is parsed leniently.
func formOverrides(contentType string, body []byte) []string {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil
	}
	var out []string
	switch mt {
	case "application/x-www-form-urlencoded":
		for _, kv := range strings.Split(string(body), "&") {
			k, v, _ := strings.Cut(kv, "=")
			if uk, err := url.QueryUnescape(k); err == nil {
				k = uk
			}
			if !strings.EqualFold(strings.TrimSpace(k), methodField) {
				continue
			}
			if uv, err := url.QueryUnescape(v); err == nil {
				v = uv
			}
			out = append(out, v)
		}
	case "multipart/form-data":
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		for {
			p, err := mr.NextPart()
			if err != nil {
				break
			}
			if strings.EqualFold(p.FormName(), methodField) {
				var b [64]byte
				n, _ := p.Read(b[:])
				out = append(out, string(b[:n]))
			}
			p.Close()
		}
	}
	return out
}

// methodField is the form field servers read as a method override.
const methodField = "_method"

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
