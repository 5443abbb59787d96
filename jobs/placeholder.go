package jobs

import (
	"fmt"
	"strings"
)

// Limits of placeholder expansion, so that a configuration whose properties
// refer to each other many times over fails cleanly instead of growing
// without end.
const (
	maxExpanded = 1 << 20 // bytes in one expanded value
	maxDepth    = 64      // placeholders nested in one another's values
)

// Expand replaces the ${NAME} and ${NAME:default} placeholders in s.
//
// lookup returns the value of a name; a value found is itself expanded, so a
// property may refer to others, and a default is expanded when the name is
// not found: "${a:${b:x}}" is a's value, or else b's, or else "x". A name
// may be built from placeholders too: "${db.${env}.url}". The default
// starts after the first ":" of the placeholder that is not inside a nested
// one, and may be empty ("${NAME:}"). Braces nest: "${a:{x}}" has the
// default "{x}".
//
// "\${" stands for a literal "${"; a "$" or "}" elsewhere is literal too.
//
// Errors wrap [ErrPlaceholder]: a name not found with no default (the error
// names it), a name whose value refers back to it (the error shows the
// chain, "a -> b -> a"), an empty name, a "${" without its "}", or an
// expansion that goes through more than 64 values, nests placeholders more
// than 128 deep, or grows longer than 1 MiB.
func Expand(s string, lookup func(name string) (value string, ok bool)) (string, error) {
	x := &expander{lookup: lookup}
	return x.expand(s)
}

// expander expands placeholders with one lookup, remembering the values
// already expanded.
type expander struct {
	lookup func(string) (string, bool)
	stack  []string          // names being expanded, outermost first
	done   map[string]string // expanded values by name
	depth  int               // expand calls in progress
}

func (x *expander) expand(s string) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	// Placeholders nested in names and defaults, as in ${a:${b:${c}}}, and
	// values looked up count alike.
	if x.depth++; x.depth > 2*maxDepth {
		return "", fmt.Errorf("%w: placeholders nested more than %d deep", ErrPlaceholder, 2*maxDepth)
	}
	defer func() { x.depth-- }()
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			break
		}
		if i > 0 && s[i-1] == '\\' {
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := closingBrace(s, i+2)
		if end < 0 {
			return "", fmt.Errorf("%w: %s has no closing }", ErrPlaceholder, quote(s[i:]))
		}
		v, err := x.placeholder(s[i+2 : end])
		if err != nil {
			return "", err
		}
		b.WriteString(v)
		if b.Len() > maxExpanded {
			return "", fmt.Errorf("%w: expansion longer than %d bytes", ErrPlaceholder, maxExpanded)
		}
		s = s[end+1:]
	}
	return b.String(), nil
}

// placeholder resolves the inside of one placeholder.
func (x *expander) placeholder(inner string) (string, error) {
	rawName, def, hasDef := splitDefault(inner)
	name, err := x.expand(rawName)
	if err != nil {
		return "", err
	}
	if name == "" {
		return "", fmt.Errorf("%w: empty name in ${%s}", ErrPlaceholder, clip(inner))
	}
	if v, ok := x.done[name]; ok {
		return v, nil
	}
	for i, n := range x.stack {
		if n == name {
			var chain []string
			for _, n := range append(x.stack[i:len(x.stack):len(x.stack)], name) {
				chain = append(chain, clip(n))
			}
			return "", fmt.Errorf("%w: ${%s} refers to itself: %s", ErrPlaceholder, clip(name), strings.Join(chain, " -> "))
		}
	}
	if len(x.stack) >= maxDepth {
		return "", fmt.Errorf("%w: placeholders nested more than %d deep at ${%s}", ErrPlaceholder, maxDepth, clip(name))
	}
	raw, ok := x.lookup(name)
	if !ok {
		if !hasDef {
			return "", fmt.Errorf("%w: ${%s} is not set (neither in the environment nor in the properties) and has no default; write ${%s:default} to give one", ErrPlaceholder, clip(name), clip(name))
		}
		return x.expand(def)
	}
	x.stack = append(x.stack, name)
	v, err := x.expand(raw)
	x.stack = x.stack[:len(x.stack)-1]
	if err != nil {
		return "", err
	}
	if x.done == nil {
		x.done = map[string]string{}
	}
	x.done[name] = v
	return v, nil
}

// closingBrace returns the index of the "}" closing the placeholder whose
// inside starts at from, counting nested braces, or -1.
func closingBrace(s string, from int) int {
	depth := 0
	for i := from; i < len(s); i++ {
		switch s[i] {
		case '{':
			depth++
		case '}':
			if depth == 0 {
				return i
			}
			depth--
		}
	}
	return -1
}

// splitDefault splits the inside of a placeholder at its first ":" outside
// nested braces.
func splitDefault(inner string) (name, def string, ok bool) {
	depth := 0
	for i := 0; i < len(inner); i++ {
		switch inner[i] {
		case '{':
			depth++
		case '}':
			depth--
		case ':':
			if depth == 0 {
				return inner[:i], inner[i+1:], true
			}
		}
	}
	return inner, "", false
}
