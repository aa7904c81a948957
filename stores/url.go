package stores

import (
	"net/url"
	"slices"
	"strings"
)

// Nested parameters: their values are whole store URLs.
const (
	paramEventual  = "eventual"
	paramReadModel = "readmodel"
)

// urlParts is a stack URL cut at its nested parameters.
type urlParts struct {
	// base is the URL without its nested parameters (and without the
	// '?' or '&' before the first of them).
	base                      string
	eventual, readModel       string
	hasEventual, hasReadModel bool
	// marks are the nested parameters in the order they appear.
	marks []mark
}

// mark is where a nested parameter stands in the URL: at its '?' or
// '&', its value from value to end.
type mark struct {
	name           string
	at, value, end int
}

// splitURL cuts raw at its nested parameters: each is "?name=" or
// "&name=" (the first of each name), and its value runs to the next one
// or to the end.
func splitURL(raw string) urlParts {
	var marks []mark
	for _, name := range []string{paramEventual, paramReadModel} {
		at := -1
		for _, sep := range []string{"?", "&"} {
			if i := strings.Index(raw, sep+name+"="); i >= 0 && (at < 0 || i < at) {
				at = i
			}
		}
		if at >= 0 {
			marks = append(marks, mark{name: name, at: at, value: at + len(name) + 2})
		}
	}
	if len(marks) == 2 && marks[1].at < marks[0].at {
		marks[0], marks[1] = marks[1], marks[0]
	}
	p := urlParts{base: raw, marks: marks}
	for i := range marks {
		marks[i].end = len(raw)
		if i+1 < len(marks) {
			marks[i].end = marks[i+1].at
		}
		if i == 0 {
			p.base = raw[:marks[0].at]
		}
		v := raw[marks[i].value:marks[i].end]
		if marks[i].name == paramEventual {
			p.eventual, p.hasEventual = v, true
		} else {
			p.readModel, p.hasReadModel = v, true
		}
	}
	return p
}

// ReadModelURL cuts a stack URL into the URL of its store (with any
// eventual= store) and the URL its readmodel= parameter names ("" when it
// has none).
func ReadModelURL(raw string) (storeURL, readModelURL string) {
	p := splitURL(raw)
	for _, m := range p.marks {
		if m.name != paramReadModel {
			continue
		}
		rest := raw[m.end:]
		if rest != "" && m.at == len(p.base) && !strings.Contains(p.base, "?") {
			// The read model came first, right after the store's own URL
			// without a query: the next parameter's '&' becomes its '?'.
			rest = "?" + rest[1:]
		}
		return raw[:m.at] + rest, p.readModel
	}
	return raw, ""
}

// Redact returns the store URL raw with its passwords (the URL's own, and
// those of the URLs nested in it: eventual=, readmodel=) replaced by
// "xxxxx", for printing: a URL's user info and any password= or
// sslpassword= parameter.
func Redact(raw string) string {
	out, _ := redact(raw)
	return out
}

// redact returns raw redacted and the secrets it hid.
func redact(raw string) (string, []string) {
	p := splitURL(raw)
	if len(p.marks) == 0 {
		return redactOne(raw)
	}
	var b strings.Builder
	out, secrets := redactOne(p.base)
	b.WriteString(out)
	for _, m := range p.marks {
		b.WriteString(raw[m.at:m.value])
		out, s := redactOne(raw[m.value:m.end])
		b.WriteString(out)
		secrets = append(secrets, s...)
	}
	return b.String(), secrets
}

// redactOne hides the password of one URL's user info
// (scheme://user:password@host) and the values of its parameters named
// password or ending so (the URL's query, or a keyword/value DSN).
func redactOne(s string) (string, []string) {
	var secrets []string
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		// The user info ends at the last @ before the query: a password
		// with an unescaped / or # is still a password (the parsers find
		// the @ the same way, and then fail, quoting the URL).
		end := strings.IndexAny(rest, "?")
		if end < 0 {
			end = len(rest)
		}
		if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
			if user, pw, has := strings.Cut(rest[:at], ":"); has && pw != "" {
				secrets = append(secrets, pw)
				s = scheme + "://" + user + ":xxxxx" + rest[at:]
			}
		}
	}
	var b strings.Builder
	for {
		i := strings.Index(strings.ToLower(s), "password=")
		if i < 0 {
			b.WriteString(s)
			break
		}
		i += len("password=")
		end := strings.IndexAny(s[i:], "& ")
		if end < 0 {
			end = len(s) - i
		}
		if pw := s[i : i+end]; pw != "" {
			secrets = append(secrets, pw)
		}
		b.WriteString(s[:i])
		b.WriteString("xxxxx")
		s = s[i+end:]
	}
	return b.String(), secrets
}

// hideSecrets returns err with every password of raw replaced by "xxxxx"
// in its message (in the forms written and percent-decoded); errors.Is
// and errors.As still see err's chain.
func hideSecrets(err error, raw string) error {
	_, secrets := redact(raw)
	for _, s := range slices.Clone(secrets) {
		if d, derr := url.PathUnescape(s); derr == nil && d != s {
			secrets = append(secrets, d)
		}
	}
	msg := err.Error()
	hidden := msg
	for _, s := range secrets {
		hidden = strings.ReplaceAll(hidden, s, "xxxxx")
	}
	if hidden == msg {
		return err
	}
	return &redactedError{msg: hidden, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
