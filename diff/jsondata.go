package diff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// JSON data is what encoding/json decodes into an any: map[string]any,
// []any, string, bool, nil and numbers. Raw JSON is decoded as Kubernetes
// decodes it into unstructured content (k8s.io/apimachinery's
// unstructured JSON scheme, sigs.k8s.io/json with PreserveInts): a number
// literal with neither a fraction nor an exponent that fits in an int64
// becomes an int64, any other number a float64, so 8 is an int64 and 8.0
// and 8e0 are float64. By default numbers are compared by value, whatever
// their Go type (int64, float64, json.Number...): 8 equals 8.0. Under
// StrictNumbers an integer never equals a float, as for go-cmp on
// unstructured content.

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

// floatKind reports whether v, a number, is a float64 once in unstructured
// content: a Go float, a json.Number whose literal Kubernetes decodes as a
// float64 (see above), or an unsigned integer beyond int64 (encoding/json
// writes it as an integer literal that overflows an int64).
func floatKind(v any) bool {
	switch x := v.(type) {
	case float64, float32:
		return true
	case json.Number:
		_, err := strconv.ParseInt(string(x), 10, 64)
		return err != nil
	case uint64:
		return x > math.MaxInt64
	case uint:
		return uint64(x) > math.MaxInt64
	}
	return false
}

// numbersSame is numbersEqual under StrictNumbers: equal values of the same
// kind (integer or float).
func numbersSame(a, b any, strictNum bool) (equal, bothNumbers bool) {
	eq, both := numbersEqual(a, b)
	if eq && strictNum && floatKind(a) != floatKind(b) {
		return false, true
	}
	return eq, both
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

// decodeJSON parses raw JSON into JSON data, numbers decoded as
// Kubernetes decodes them (int64 or float64, see above).
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
	return decodeNumbers(v), nil
}

// decodeNumbers replaces the json.Number values of freshly decoded JSON
// data, in place, by int64 or float64 as Kubernetes decodes the literal.
// A literal that is no float64 either (1e400) is kept, for checkJSONData
// to report.
func decodeNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if n, ok := e.(json.Number); ok {
				x[k] = decodeNumber(n)
			} else if !isPlainLeaf(e) {
				x[k] = decodeNumbers(e)
			}
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = decodeNumbers(e)
		}
		return x
	case json.Number:
		return decodeNumber(x)
	}
	return v
}

func decodeNumber(n json.Number) any {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i
	}
	if f, err := strconv.ParseFloat(string(n), 64); err == nil {
		return f
	}
	return n
}

// reencoded returns a copy of JSON data as it is after encoding/json writes
// it and Kubernetes decodes it again (see decodeJSON): a float with an
// integral value that encoding/json writes as an integer literal fitting
// in an int64 (below 1e21 in magnitude; -0 is written "-0") becomes an
// int64. Cluster API patches current objects in that form (it re-marshals
// the object before applying the patch).
func reencoded(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = reencoded(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = reencoded(e)
		}
		return out
	case float64:
		return reencodedFloat(x)
	case float32:
		return reencodedFloat(float64(x))
	case json.Number:
		return decodeNumber(x)
	}
	return v
}

func reencodedFloat(f float64) any {
	// encoding/json writes |f| < 1e21 in 'f' format: an integral value
	// has no fraction. -2^63 is the only float at or beyond ±2^63 that
	// fits in an int64.
	if f == math.Trunc(f) && f >= -(1<<63) && f < 1<<63 {
		return int64(f)
	}
	return f
}

// floatForms returns a copy of JSON data in which every float is a
// json.Number whose literal Kubernetes decodes as a float64 again: 8.0 is
// written "8.0" (encoding/json would write "8", an int64 once decoded),
// -0.0 "-0.0". Integers and other values are kept.
func floatForms(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = floatForms(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = floatForms(e)
		}
		return out
	case float64, float32, uint64, uint:
		if !floatKind(x) {
			return v
		}
		_, f, _, _ := numberOf(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return v // no JSON form: left for the encoder to refuse
		}
		return json.Number(floatLiteral(f))
	}
	return v
}

// floatLiteral is f as encoding/json writes it, with ".0" added when that
// is an integer literal.
func floatLiteral(f float64) string {
	raw, _ := json.Marshal(f)
	s := string(raw)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
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
func dataEqual(a, b any) bool { return dataSame(a, b, false) }

// dataSame is dataEqual; with strictNum an integer never equals a float
// (StrictNumbers).
func dataSame(a, b any, strictNum bool) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, e := range x {
			f, ok := y[k]
			if !ok || !dataSame(e, f, strictNum) {
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
			if !dataSame(x[i], y[i], strictNum) {
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
	eq, both := numbersSame(a, b, strictNum)
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
