package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Format is the syntax of a configuration file.
type Format int

// Formats of configuration files.
const (
	// YAML, read with go.yaml.in/yaml/v3: anchors, aliases and merge keys
	// ("<<") are followed.
	YAML Format = iota + 1
	// JSON, read with encoding/json.
	JSON
)

// String returns "YAML" or "JSON".
func (f Format) String() string {
	switch f {
	case YAML:
		return "YAML"
	case JSON:
		return "JSON"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// tree is a parsed file in a form common to YAML and JSON: maps keep their
// keys in order, scalars their text, every node its line.
type tree struct {
	kind  treeKind
	value string  // scalar text
	keys  []*tree // map keys (scalars)
	vals  []*tree // map values, one per key
	items []*tree // list items
	line  int
}

type treeKind int

const (
	nullNode treeKind = iota
	scalarNode
	mapNode
	listNode
)

func (k treeKind) String() string {
	return [...]string{"nothing", "a single value", "a map", "a list"}[k]
}

// maxNodes bounds the nodes built from one file, aliases followed, so that
// a small file of nested aliases cannot expand into an enormous tree.
const maxNodes = 100000

// errTooBig is the error of a file of more than maxNodes values; aliased
// says whether aliases were followed to count them.
func errTooBig(aliased bool) error {
	if aliased {
		return fmt.Errorf("%w: more than %d values, aliases followed", ErrSyntax, maxNodes)
	}
	return fmt.Errorf("%w: more than %d values", ErrSyntax, maxNodes)
}

// yamlCount counts the nodes built from a YAML file, and whether aliases
// were followed to build them.
type yamlCount struct {
	nodes   int
	aliased bool
}

// parseYAML reads one YAML document. An empty input is a null tree.
func parseYAML(data []byte) (*tree, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &tree{line: 1}, nil
		}
		return nil, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: more than one YAML document", ErrSyntax)
	}
	return fromYAML(&doc, new(yamlCount), 0)
}

// fromYAML converts a YAML node, aliases followed, counting the nodes made.
func fromYAML(n *yaml.Node, count *yamlCount, depth int) (*tree, error) {
	if count.nodes++; count.nodes > maxNodes || depth > 1000 {
		return nil, errTooBig(count.aliased)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return &tree{line: n.Line}, nil
		}
		return fromYAML(n.Content[0], count, depth+1)
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, fmt.Errorf("%w: line %d: alias without anchor", ErrSyntax, n.Line)
		}
		count.aliased = true
		return fromYAML(n.Alias, count, depth+1)
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return &tree{kind: nullNode, line: n.Line}, nil
		}
		return &tree{kind: scalarNode, value: n.Value, line: n.Line}, nil
	case yaml.SequenceNode:
		t := &tree{kind: listNode, line: n.Line}
		for _, c := range n.Content {
			item, err := fromYAML(c, count, depth+1)
			if err != nil {
				return nil, err
			}
			t.items = append(t.items, item)
		}
		return t, nil
	case yaml.MappingNode:
		return fromYAMLMap(n, count, depth)
	}
	return nil, fmt.Errorf("%w: line %d: unexpected YAML node", ErrSyntax, n.Line)
}

// fromYAMLMap converts a YAML mapping, merge keys included.
func fromYAMLMap(n *yaml.Node, count *yamlCount, depth int) (*tree, error) {
	t := &tree{kind: mapNode, line: n.Line}
	var merges []*tree
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, err := fromYAML(n.Content[i], count, depth+1)
		if err != nil {
			return nil, err
		}
		v, err := fromYAML(n.Content[i+1], count, depth+1)
		if err != nil {
			return nil, err
		}
		if n.Content[i].ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.kind != scalarNode {
			return nil, fmt.Errorf("%w: line %d: a map key must be a single value, not %v", ErrSyntax, k.line, k.kind)
		}
		if err := t.put(k, v); err != nil {
			return nil, err
		}
	}
	// Merged maps give the keys the map does not have, the first merged
	// map first.
	for _, m := range merges {
		srcs := []*tree{m}
		if m.kind == listNode {
			srcs = m.items
		}
		for _, src := range srcs {
			if src.kind != mapNode {
				return nil, fmt.Errorf("%w: line %d: << must merge a map or a list of maps", ErrSyntax, src.line)
			}
			for i, k := range src.keys {
				if t.get(k.value) == nil {
					t.keys = append(t.keys, k)
					t.vals = append(t.vals, src.vals[i])
				}
			}
		}
	}
	return t, nil
}

// put adds a key to a map, refusing a repeated one.
func (t *tree) put(k, v *tree) error {
	if prev := t.getKey(k.value); prev != nil {
		return fmt.Errorf("%w: line %d: key %s repeated (first on line %d)", ErrSyntax, k.line, quote(k.value), prev.line)
	}
	t.keys = append(t.keys, k)
	t.vals = append(t.vals, v)
	return nil
}

func (t *tree) getKey(name string) *tree {
	for _, k := range t.keys {
		if k.value == name {
			return k
		}
	}
	return nil
}

// get returns the value of key name in a map, or nil.
func (t *tree) get(name string) *tree {
	for i, k := range t.keys {
		if k.value == name {
			return t.vals[i]
		}
	}
	return nil
}

// parseJSON reads one JSON value. An empty input is a null tree.
func parseJSON(data []byte) (*tree, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return &tree{line: 1}, nil
	}
	p := &jsonParser{dec: json.NewDecoder(bytes.NewReader(data)), data: data}
	p.dec.UseNumber()
	t, err := p.value(0)
	if err != nil {
		return nil, err
	}
	if _, err := p.dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: line %d: data after the JSON value", ErrSyntax, p.line())
	}
	return t, nil
}

type jsonParser struct {
	dec   *json.Decoder
	data  []byte
	count int
}

// line returns the line of the decoder's position.
func (p *jsonParser) line() int {
	off := int(p.dec.InputOffset())
	off = min(off, len(p.data))
	return 1 + bytes.Count(p.data[:off], []byte("\n"))
}

func (p *jsonParser) token() (json.Token, int, error) {
	// The offset before the token, past the white space that precedes it,
	// is the token's line.
	off := int(p.dec.InputOffset())
	for off < len(p.data) && (p.data[off] == ' ' || p.data[off] == '\t' || p.data[off] == '\n' || p.data[off] == '\r' || p.data[off] == ',' || p.data[off] == ':') {
		off++
	}
	line := 1 + bytes.Count(p.data[:min(off, len(p.data))], []byte("\n"))
	tok, err := p.dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, line, fmt.Errorf("%w: line %d: %v", ErrSyntax, line, err)
	}
	return tok, line, nil
}

func (p *jsonParser) value(depth int) (*tree, error) {
	if p.count++; p.count > maxNodes || depth > 1000 {
		return nil, errTooBig(false)
	}
	tok, line, err := p.token()
	if err != nil {
		return nil, err
	}
	switch tok := tok.(type) {
	case json.Delim:
		switch tok {
		case '{':
			t := &tree{kind: mapNode, line: line}
			for p.dec.More() {
				ktok, kline, err := p.token()
				if err != nil {
					return nil, err
				}
				k := &tree{kind: scalarNode, value: ktok.(string), line: kline}
				v, err := p.value(depth + 1)
				if err != nil {
					return nil, err
				}
				if err := t.put(k, v); err != nil {
					return nil, err
				}
			}
			_, _, err := p.token() // '}'
			return t, err
		case '[':
			t := &tree{kind: listNode, line: line}
			for p.dec.More() {
				v, err := p.value(depth + 1)
				if err != nil {
					return nil, err
				}
				t.items = append(t.items, v)
			}
			_, _, err := p.token() // ']'
			return t, err
		}
		return nil, fmt.Errorf("%w: line %d: unexpected %v", ErrSyntax, line, tok)
	case nil:
		return &tree{kind: nullNode, line: line}, nil
	case string:
		return &tree{kind: scalarNode, value: tok, line: line}, nil
	case json.Number:
		return &tree{kind: scalarNode, value: tok.String(), line: line}, nil
	case bool:
		return &tree{kind: scalarNode, value: strconv.FormatBool(tok), line: line}, nil
	}
	return nil, fmt.Errorf("%w: line %d: unexpected %v", ErrSyntax, line, tok)
}
