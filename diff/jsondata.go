package diff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
)

// JSON data is what encoding/json decodes into an any: map[string]any,
// []any, string, bool, nil and numbers. Numbers are normalised to int64 when
// integral and representable, float64 otherwise; unstructured content from
// client-go (int64, float64) and decoded JSON (json.Number) compare equal.

// numberOf returns v as a number. isInt says whether i holds the value.
func numberOf(v any) (i int64, f float64, isInt, ok bool) {
	switch x := v.(type) {
	case int64:
		return x, float64(x), true, true
	case int:
		return int64(x), float64(x), true, true
	case int32:
		return int64(x), float64(x), true, true
	case int16:
		return int64(x), float64(x), true, true
	case int8:
		return int64(x), float64(x), true, true
	case uint8:
		return int64(x), float64(x), true, true
	case uint16:
		return int64(x), float64(x), true, true
	case uint32:
		return int64(x), float64(x), true, true
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), float64(x), true, true
		}
		return 0, float64(x), false, true
	case uint:
		if uint64(x) <= math.MaxInt64 {
			return int64(x), float64(x), true, true
		}
		return 0, float64(x), false, true
	case float64:
		return floatNumber(x)
	case float32:
		return floatNumber(float64(x))
	case json.Number:
		if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return n, float64(n), true, true
		}
		if fl, err := strconv.ParseFloat(string(x), 64); err == nil {
			return floatNumber(fl)
		}
	}
	return 0, 0, false, false
}

func floatNumber(x float64) (int64, float64, bool, bool) {
	if x == math.Trunc(x) && x >= -9.007199254740992e15 && x <= 9.007199254740992e15 {
		return int64(x), x, true, true
	}
	return 0, x, false, true
}

func numbersEqual(a, b any) (equal, bothNumbers bool) {
	ai, af, aInt, aok := numberOf(a)
	bi, bf, bInt, bok := numberOf(b)
	if !aok || !bok {
		return false, false
	}
	if aInt && bInt {
		return ai == bi, true
	}
	return af == bf, true
}

// normalizeJSON returns JSON data with numbers normalised (see above). It
// copies only what it must change.
func normalizeJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalizeJSON(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalizeJSON(e)
		}
		return x
	case string, bool, nil, int64:
		return v
	}
	if i, f, isInt, ok := numberOf(v); ok {
		if isInt {
			return i
		}
		return f
	}
	return v
}

// maxJSONDepth bounds the nesting checkJSONData accepts.
const maxJSONDepth = 1000

// checkJSONData reports the first value that is not JSON data.
func checkJSONData(v any, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("%w: nested more than %d levels", ErrTooDeep, maxJSONDepth)
	}
	leafOK := depth < maxJSONDepth // a leaf one level down needs no call
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if leafOK && isPlainLeaf(e) {
				continue
			}
			if err := checkJSONData(e, depth+1); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
	case []any:
		for i, e := range x {
			if leafOK && isPlainLeaf(e) {
				continue
			}
			if err := checkJSONData(e, depth+1); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
	case string, bool, nil:
	default:
		_, f, _, ok := numberOf(v)
		if !ok {
			return fmt.Errorf("%w: %T", ErrUnsupportedValue, v)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%w: %v has no JSON form", ErrUnsupportedValue, f)
		}
	}
	return nil
}

// isPlainLeaf reports whether v is a string, bool, null or int64: JSON
// data that needs no check.
func isPlainLeaf(v any) bool {
	switch v.(type) {
	case string, bool, nil, int64:
		return true
	}
	return false
}

// decodeJSON parses raw JSON into JSON data with normalised numbers.
func decodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	// Anything but white space after the value is an error (dec.More
	// would let a stray "}" through).
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after the JSON value at offset %d", dec.InputOffset())
	}
	return normalizeJSON(v), nil
}

// toJSONData converts any JSON-marshalable value to JSON data.
func toJSONData(v any) (any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return decodeJSON(raw)
}

// emptyData reports whether v is absent in the folded sense: null, "",
// an empty list, or an object whose values are all empty.
func emptyData(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	case map[string]any:
		for _, e := range x {
			if !emptyData(e) {
				return false
			}
		}
		return true
	}
	return false
}

// dataEqual is exact JSON equality (no folding), numbers compared by value.
func dataEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, e := range x {
			f, ok := y[k]
			if !ok || !dataEqual(e, f) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !dataEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case nil:
		return b == nil
	}
	eq, both := numbersEqual(a, b)
	return both && eq
}

// deepCopyData copies JSON data.
func deepCopyData(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopyData(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopyData(e)
		}
		return out
	}
	return v
}
