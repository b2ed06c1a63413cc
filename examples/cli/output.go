package cli

import (
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// APIVersion is the apiVersion of what the commands print with -o json or
// -o yaml, so that a script can tell when its shape changes.
const APIVersion = "cli.upgradekit.io/v1alpha1"

// Output formats of -o.
const (
	Table = "table"
	Text  = "text"
	JSON  = "json"
	YAML  = "yaml"
)

// OutputFlag defines -o, --output on fs with the default def; formats
// lists what it takes, the default first.
func OutputFlag(fs *pflag.FlagSet, p *string, formats ...string) {
	fs.StringVarP(p, "output", "o", formats[0], "output format: "+strings.Join(formats, ", "))
}

// CheckOutput returns a [UsageError] when value is none of formats.
func CheckOutput(value string, formats ...string) error {
	if slices.Contains(formats, value) {
		return nil
	}
	return Usagef("--output %q: want %s", value, strings.Join(formats, ", "))
}

// Object returns v as a Kubernetes-shaped object of the given kind:
// apiVersion and kind first, then v's fields under their JSON names, with
// every time.Duration written as a string ("8m0s"), a nil slice or map
// written as an empty one (or left out under omitempty) and no null
// anywhere. A v that is a slice becomes a List of kind-typed items.
func Object(kind string, v any) (map[string]any, error) {
	val, err := plain(reflect.ValueOf(v))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kind, err)
	}
	out := map[string]any{"apiVersion": APIVersion, "kind": kind}
	switch x := val.(type) {
	case map[string]any:
		for k, v := range x {
			if k != "apiVersion" && k != "kind" {
				out[k] = v
			}
		}
	case []any:
		for i, item := range x {
			if m, ok := item.(map[string]any); ok {
				x[i] = withType(kind, m)
			}
		}
		out["kind"] = kind + "List"
		out["items"] = x
	default:
		return nil, fmt.Errorf("%s: a %T is no object", kind, v)
	}
	return out, nil
}

func withType(kind string, m map[string]any) map[string]any {
	out := map[string]any{"apiVersion": APIVersion, "kind": kind}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Write prints obj, an [Object], as indented JSON or as YAML.
func Write(w io.Writer, format string, obj map[string]any) error {
	var b []byte
	var err error
	switch format {
	case JSON:
		b, err = json.MarshalIndent(obj, "", "  ")
		b = append(b, '\n')
	case YAML:
		b, err = yaml.Marshal(obj)
	default:
		return fmt.Errorf("output format %q: want json or yaml", format)
	}
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// WriteObject is [Object] then [Write].
func WriteObject(w io.Writer, format, kind string, v any) error {
	obj, err := Object(kind, v)
	if err != nil {
		return err
	}
	return Write(w, format, obj)
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	marshalerType = reflect.TypeFor[json.Marshaler]()
	textType      = reflect.TypeFor[encoding.TextMarshaler]()
)

// plain turns v into maps, slices and scalars as encoding/json would, but
// with durations as strings and empty slices and maps for nil ones.
func plain(v reflect.Value) (any, error) {
	if !v.IsValid() {
		return nil, nil
	}
	t := v.Type()
	switch {
	case t == durationType:
		return time.Duration(v.Int()).String(), nil
	case t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface && (t.Implements(marshalerType) || t.Implements(textType)),
		(t.Kind() == reflect.Pointer && !v.IsNil() && (t.Implements(marshalerType) || t.Implements(textType))):
		b, err := json.Marshal(v.Interface())
		if err != nil {
			return nil, err
		}
		var out any
		err = json.Unmarshal(b, &out)
		return out, err
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil, nil
		}
		return plain(v.Elem())
	case reflect.Struct:
		out := map[string]any{}
		if err := fields(v, out); err != nil {
			return nil, err
		}
		return out, nil
	case reflect.Map:
		out := make(map[string]any, v.Len())
		it := v.MapRange()
		for it.Next() {
			item, err := plain(it.Value())
			if err != nil {
				return nil, err
			}
			if item != nil {
				out[fmt.Sprint(it.Key().Interface())] = item
			}
		}
		return out, nil
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return v.Bytes(), nil // base64, as encoding/json writes []byte
		}
		out := make([]any, 0, v.Len())
		for i := range v.Len() {
			item, err := plain(v.Index(i))
			if err != nil {
				return nil, err
			}
			out = append(out, item)
		}
		return out, nil
	}
	return v.Interface(), nil
}

// fields adds the exported fields of the struct v to out under their JSON
// names, honouring omitempty, "-" and embedded structs.
func fields(v reflect.Value, out map[string]any) error {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		fv := v.Field(i)
		if f.Anonymous && name == "" {
			for fv.Kind() == reflect.Pointer {
				if fv.IsNil() {
					break
				}
				fv = fv.Elem()
			}
			if fv.Kind() == reflect.Struct {
				if err := fields(fv, out); err != nil {
					return err
				}
				continue
			}
			if !f.IsExported() {
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		omitEmpty := slices.Contains(strings.Split(opts, ","), "omitempty")
		omitZero := slices.Contains(strings.Split(opts, ","), "omitzero")
		if (omitEmpty && empty(fv)) || (omitZero && fv.IsZero()) {
			continue
		}
		item, err := plain(fv)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if item != nil {
			out[name] = item
		}
	}
	return nil
}

// empty is encoding/json's omitempty test.
func empty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}
