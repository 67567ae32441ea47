package config

import (
	"errors"
	"fmt"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// explain turns the YAML decoder's error into one a person can act on: a misspelt field
// named with the fields that are there and the nearest of them, a mis-indented line at
// its own line (the parser often notices a few lines earlier or later), each error as
// file:line.
func explain(data []byte, source string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs := make([]string, len(te.Errors))
		for i, e := range te.Errors {
			msgs[i] = source + ":" + unknownField(e)
		}
		return errors.New(strings.Join(msgs, "\n"))
	}
	m := parserLine.FindStringSubmatch(err.Error())
	if m == nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	// The parser notices a mis-indented line late or early, and says so in these words;
	// its line is then replaced by the heuristic's when that is near it. Any other
	// message (an unclosed quote, a bad character) is the parser's own to tell.
	at, _ := strconv.Atoi(m[1])
	if indentation.MatchString(m[2]) {
		if line, why := misindented(data); line > 0 && line >= at-20 && line <= at+20 {
			return fmt.Errorf("%s:%d: %s (the YAML parser stopped at line %s: %s)", source, line, why, m[1], m[2])
		}
	}
	return fmt.Errorf("%s:%s: %s", source, m[1], m[2])
}

var (
	parserLine   = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)
	fieldUnknown = regexp.MustCompile(`^line (\d+): field (\S+) not found in type (\w+)\.(\w+)$`)
	decodeLine   = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	indentation  = regexp.MustCompile(`did not find expected key|mapping values are not allowed in this context|did not find expected '-' indicator|block sequence entries are not allowed in this context`)
)

// unknownField says one of the decoder's errors as "LINE: what", a field it does not
// know with the fields the block takes and the nearest.
func unknownField(e string) string {
	m := fieldUnknown.FindStringSubmatch(e)
	if m == nil {
		if d := decodeLine.FindStringSubmatch(e); d != nil {
			return d[1] + ": " + d[2]
		}
		return " " + e
	}
	fields := yamlFields(m[3], m[4])
	msg := fmt.Sprintf("%s: unknown field %q", m[1], m[2])
	if near := nearest(m[2], fields); near != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", near)
	}
	if len(fields) > 0 {
		msg += "; here the fields are " + strings.Join(fields, ", ")
	}
	return msg
}

// yamlFields lists the YAML keys of the struct type pkg.name the config holds
// (config.Tenant, providers.Generic).
func yamlFields(pkg, name string) []string {
	var fields []string
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] || !strings.HasPrefix(t.PkgPath(), "exacto.dev/") {
			return
		}
		seen[t] = true
		match := t.Name() == name && path.Base(t.PkgPath()) == pkg
		for f := range t.Fields() {
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if tag == "-" || !f.IsExported() {
				continue
			}
			if match && tag != "" {
				fields = append(fields, tag)
			}
			walk(f.Type)
		}
	}
	walk(reflect.TypeFor[Config]())
	return fields
}

// nearest is the field closest to got in edits, if close enough to be a typo.
func nearest(got string, fields []string) string {
	best, bestD := "", max(2, len(got)/3)+1
	for _, f := range fields {
		if d := editDistance(strings.ToLower(got), f); d < bestD {
			best, bestD = f, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// misindented finds the first line of a block-style document whose indentation fits no
// block around it, and says why; 0 when every line fits (the error is another).
// Block scalars (| and >) and flow collections over several lines are skipped.
func misindented(data []byte) (int, string) {
	stack := []block{{indent: 0}}
	opened := false // the line before opened a block: this one may go deeper
	plain := false  // the line before ended in a plain scalar, which may go on below
	quoted := false // inside a double-quoted string
	scalar := -1    // inside a block scalar: lines deeper than this are its text
	flow := 0       // open [ and { of a flow collection
	for i, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimRight(raw, " \t\r")
		content := strings.TrimLeft(line, " ")
		indent := len(line) - len(content)
		if content == "" || strings.HasPrefix(content, "#") || strings.HasPrefix(content, "---") {
			continue
		}
		switch {
		case scalar >= 0 && indent > scalar: // a block scalar's text
			continue
		case quoted: // a double-quoted string over several lines
			quoted = strings.Count(strings.ReplaceAll(content, `\"`, ""), `"`)%2 == 0
			continue
		case flow > 0:
			flow += strings.Count(content, "[") + strings.Count(content, "{") - strings.Count(content, "]") - strings.Count(content, "}")
			continue
		case plain && indent > stack[len(stack)-1].indent && !strings.HasPrefix(content, "- ") && !strings.Contains(content, ": "):
			continue // a plain scalar's continuation
		}
		scalar = -1
		item := strings.HasPrefix(content, "- ") || content == "-"
		top := stack[len(stack)-1]
		switch {
		case opened && (indent > top.indent || indent == top.indent && item):
			stack = append(stack, block{indent: indent, list: item})
		default:
			open := slices.Clone(stack)
			for len(stack) > 1 && stack[len(stack)-1].indent > indent {
				stack = stack[:len(stack)-1]
			}
			top = stack[len(stack)-1]
			if top.indent != indent || top.list != item && !(opened && item) {
				return i + 1, fmt.Sprintf("this line's indentation (%d spaces) fits no block around it: %s; mis-indented?", indent, around(open))
			}
		}
		// A list item's own keys are at the indentation after its "- ".
		rest := content
		for strings.HasPrefix(rest, "- ") {
			indent += 2 + len(rest[2:]) - len(strings.TrimLeft(rest[2:], " "))
			rest = strings.TrimLeft(rest[2:], " ")
			stack = append(stack, block{indent: indent, list: strings.HasPrefix(rest, "- ")}) // "- - x": a list in a list
		}
		if i := strings.Index(rest, " #"); i >= 0 && !strings.ContainsAny(rest[:i], `"'`) {
			rest = strings.TrimSpace(rest[:i])
		}
		value := ""
		if k, v, ok := strings.Cut(rest, ": "); ok && !strings.ContainsAny(k, `"'`) {
			value = strings.TrimSpace(v)
		}
		// A key without a value, or with only anchors and tags, opens a block.
		opened = strings.HasSuffix(rest, ":") || rest == "-" || value != "" && onlyProperties(value)
		plain = value != "" && !opened && !strings.ContainsAny(value[:1], `"'[{|>&*!`)
		quoted = strings.HasPrefix(value, `"`) && strings.Count(strings.ReplaceAll(value, `\"`, ""), `"`)%2 == 1
		switch {
		case value == "|" || value == ">" || strings.HasPrefix(value, "|") || strings.HasPrefix(value, ">"):
			scalar = indent
		case strings.HasPrefix(value, "[") || strings.HasPrefix(value, "{"):
			flow = strings.Count(value, "[") + strings.Count(value, "{") - strings.Count(value, "]") - strings.Count(value, "}")
		}
	}
	return 0, ""
}

// onlyProperties says whether v is only anchors (&a) and tags (!!map): the value is
// the block below.
func onlyProperties(v string) bool {
	for _, f := range strings.Fields(v) {
		if f[0] != '&' && f[0] != '!' {
			return false
		}
	}
	return true
}

// block is a mapping or a list open at an indentation.
type block struct {
	indent int
	list   bool // a sequence's items ("- ") are at this indentation
}

// around says the indentations the open blocks take.
func around(stack []block) string {
	var parts []string
	for _, l := range slices.Backward(stack) {
		what := "keys"
		if l.list {
			what = "list items (- )"
		}
		parts = append(parts, what+" at "+strconv.Itoa(l.indent))
	}
	return "the blocks open here take " + strings.Join(parts, ", ")
}
