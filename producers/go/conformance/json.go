package conformance

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/hamba/avro/v2"
)

// Conversions between the vectors' JSON form of a record (bytes as {"hex": "..."}, a union value
// written plainly) and the Go values hamba/avro encodes, directed by the schema so that an int,
// a long and a union branch each get exactly their Go type.

func toNative(schema avro.Schema, v any, path string) (any, error) {
	switch s := schema.(type) {
	case *avro.RecordSchema:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: expected an object for record %s", path, s.FullName())
		}
		out := make(map[string]any, len(m))
		names := map[string]bool{}
		for _, f := range s.Fields() {
			names[f.Name()] = true
			fv, present := m[f.Name()]
			if !present {
				return nil, fmt.Errorf("%s.%s: missing field", path, f.Name())
			}
			conv, err := toNative(f.Type(), fv, path+"."+f.Name())
			if err != nil {
				return nil, err
			}
			out[f.Name()] = conv
		}
		for k := range m {
			if !names[k] {
				return nil, fmt.Errorf("%s.%s: field not in schema %s", path, k, s.FullName())
			}
		}
		return out, nil
	case *avro.ArraySchema:
		items, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("%s: expected an array", path)
		}
		out := make([]any, 0, len(items))
		for i, item := range items {
			conv, err := toNative(s.Items(), item, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out = append(out, conv)
		}
		return out, nil
	case *avro.UnionSchema:
		if v == nil {
			for _, t := range s.Types() {
				if t.Type() == avro.Null {
					return nil, nil
				}
			}
			return nil, fmt.Errorf("%s: null for a union without null", path)
		}
		for _, t := range s.Types() {
			if t.Type() == avro.Null {
				continue
			}
			conv, err := toNative(t, v, path)
			if err == nil {
				return map[string]any{unionName(t): conv}, nil
			}
		}
		return nil, fmt.Errorf("%s: value fits no branch of the union", path)
	case *avro.PrimitiveSchema:
		switch s.Type() {
		case avro.String:
			str, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("%s: expected a string", path)
			}
			return str, nil
		case avro.Bytes:
			m, ok := v.(map[string]any)
			text, ok2 := m["hex"].(string)
			if !ok || !ok2 || len(m) != 1 {
				return nil, fmt.Errorf(`%s: expected {"hex": "..."}`, path)
			}
			raw, err := hex.DecodeString(text)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", path, err)
			}
			return raw, nil
		case avro.Int, avro.Long:
			n, ok := v.(json.Number)
			if !ok {
				return nil, fmt.Errorf("%s: expected an integer", path)
			}
			i, err := n.Int64()
			if err != nil {
				return nil, fmt.Errorf("%s: %v", path, err)
			}
			if s.Type() == avro.Int {
				if i < -1<<31 || i >= 1<<31 {
					return nil, fmt.Errorf("%s: %d does not fit an int", path, i)
				}
				return int(i), nil
			}
			return i, nil
		case avro.Boolean:
			b, ok := v.(bool)
			if !ok {
				return nil, fmt.Errorf("%s: expected a boolean", path)
			}
			return b, nil
		case avro.Null:
			if v != nil {
				return nil, fmt.Errorf("%s: expected null", path)
			}
			return nil, nil
		}
	}
	return nil, fmt.Errorf("%s: schema type %s is not used by bernstein's schemas", path, schema.Type())
}

func unionName(t avro.Schema) string {
	if n, ok := t.(avro.NamedSchema); ok {
		return n.FullName()
	}
	return string(t.Type())
}

// toJSONForm turns a decoded record (hamba's generic form) into the vectors' JSON form, with
// numbers as json.Number.
func toJSONForm(schema avro.Schema, v any) (any, error) {
	switch s := schema.(type) {
	case *avro.RecordSchema:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("decoded %s is %T", s.FullName(), v)
		}
		out := map[string]any{}
		for _, f := range s.Fields() {
			conv, err := toJSONForm(f.Type(), m[f.Name()])
			if err != nil {
				return nil, err
			}
			out[f.Name()] = conv
		}
		return out, nil
	case *avro.ArraySchema:
		items, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("decoded array is %T", v)
		}
		out := []any{}
		for _, item := range items {
			conv, err := toJSONForm(s.Items(), item)
			if err != nil {
				return nil, err
			}
			out = append(out, conv)
		}
		return out, nil
	case *avro.UnionSchema:
		if v == nil {
			return nil, nil
		}
		// hamba decodes a branch of a named type as {"<full name>": value} and a primitive
		// branch of a ["null", T] union as the bare value.
		if m, ok := v.(map[string]any); ok && len(m) == 1 {
			for _, t := range s.Types() {
				if inner, ok := m[unionName(t)]; ok {
					return toJSONForm(t, inner)
				}
			}
		}
		var branches []avro.Schema
		for _, t := range s.Types() {
			if t.Type() != avro.Null {
				branches = append(branches, t)
			}
		}
		if len(branches) == 1 {
			if _, named := branches[0].(avro.NamedSchema); !named {
				return toJSONForm(branches[0], v)
			}
		}
		return nil, fmt.Errorf("decoded union value %T names no branch", v)
	case *avro.PrimitiveSchema:
		switch x := v.(type) {
		case []byte:
			return map[string]any{"hex": hex.EncodeToString(x)}, nil
		case int:
			return json.Number(fmt.Sprint(x)), nil
		case int32:
			return json.Number(fmt.Sprint(x)), nil
		case int64:
			return json.Number(fmt.Sprint(x)), nil
		default:
			return x, nil
		}
	}
	return nil, fmt.Errorf("schema type %s is not used by bernstein's schemas", schema.Type())
}

// jsonEqual compares two JSON-form values exactly (numbers by their decimal text).
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !jsonEqual(xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		return ok && slices.EqualFunc(x, y, jsonEqual)
	case json.Number:
		y, ok := b.(json.Number)
		return ok && normNumber(x) == normNumber(y)
	default:
		return a == b
	}
}

func normNumber(n json.Number) string {
	if i, err := n.Int64(); err == nil {
		return fmt.Sprint(i)
	}
	return string(n)
}
