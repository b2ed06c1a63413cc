package diff

import (
	"maps"
	"reflect"
	"slices"
	"strings"
)

// Secrets by name. The Sensitive patterns name paths the schema knows;
// this policy does not depend on the schema, the case of a name or the
// options: whatever they say (WithoutDefaults included), String, JSON and
// Shown redact, unless ShowSecrets is given,
//   - the value of any field whose name contains, in any case, one of
//     secretWords (adminPassword, Password, clientSecret, bootstrapToken,
//     userData, sshAuthorizedKeys, ...), except names of references
//     (secretRef, secretName, a "secret" object naming a Secret);
//   - the content of a file under any field named files, whether files
//     is a list (the schema) or a map (a schema-invalid shape);
//   - the value of an extraArgs or extraEnvs entry whose name is such a
//     name (oidc-client-secret, AWS_SECRET_ACCESS_KEY; token-auth-file is
//     not: see secretName), as a list of {name, value} (keyed by name, or
//     compared by index, as under WithoutDefaults: an entry named so on
//     either side) or as a map;
//   - every command of preKubeadmCommands, postKubeadmCommands and
//     bootCommands: they are shell text, which carries credentials in
//     shapes no name finds (`curl -u ops:pw`, `echo pw | docker login
//     --password-stdin`, a heredoc). Their path still says which command
//     changed, and equal digests show equal commands.
//
// The values themselves stay intact in Change.Old and Change.New, for
// patches.
var secretWords = [...]string{"password", "passwd", "secret", "token", "userdata", "privatekey", "sshauthorizedkeys", "credential"}

// secretName reports whether a field or argument name names a secret.
func secretName(name string) bool {
	l := strings.ToLower(name)
	if l == "secret" || strings.HasSuffix(l, "ref") || strings.HasSuffix(l, "name") || strings.HasSuffix(l, "file") {
		// A reference to a Secret (secretRef, secretName, {secret: {name,
		// key}}) or a path to a file holding one: not the secret itself.
		return false
	}
	for _, w := range secretWords {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

// isRedacted reports whether v is already a digest from Redact.
func isRedacted(v any) bool {
	s, ok := v.(string)
	return ok && strings.HasPrefix(s, "<redacted sha256:")
}

func isFiles(name string) bool { return strings.EqualFold(name, "files") }

func isContent(name string) bool {
	return strings.EqualFold(name, "content") || strings.EqualFold(name, "contents")
}

// isExtraArgs reports whether a field holds named values: extraArgs,
// kubeletExtraArgs, extraEnvs.
func isExtraArgs(name string) bool {
	return len(name) >= 9 && (strings.EqualFold(name[len(name)-9:], "extraargs") || strings.EqualFold(name[len(name)-9:], "extraenvs"))
}

// isCommands reports whether a field holds shell commands.
func isCommands(name string) bool {
	return strings.EqualFold(name, "preKubeadmCommands") || strings.EqualFold(name, "postKubeadmCommands") || strings.EqualFold(name, "bootCommands")
}

// secretCtx is where a value sits, for redacting by name below it.
type secretCtx struct {
	inFiles     bool // below a field named files
	inExtraArgs bool // directly in an extraArgs or extraEnvs list or map
}

// secretPath reports whether the current path names a secret, and the
// context for the values below it.
func (w *walker) secretPath() (bool, secretCtx) {
	var ctx secretCtx
	last := len(w.frames) - 1
	for i, f := range w.frames {
		if f.elem {
			if ctx.inExtraArgs {
				switch {
				case f.key > 0 && secretName(string(w.keyed[f.key-1].appendSelector(nil))):
					return true, ctx
				case f.key == 0 && f.name != "" && i < last:
					// An entry compared by index, named like a secret on
					// either side (nameUnkeyedArg): a part of it.
					return true, ctx
				case i == last:
					// The whole entry: redactNamed redacts its value by
					// its name.
					return false, ctx
				}
			}
			ctx.inExtraArgs = false
			continue
		}
		switch {
		case ctx.inFiles && isContent(f.name):
			return true, ctx
		case secretName(f.name), isCommands(f.name):
			return true, ctx
		}
		if isFiles(f.name) {
			ctx.inFiles = true
		}
		ctx.inExtraArgs = isExtraArgs(f.name)
		if ctx.inExtraArgs {
			continue
		}
	}
	return false, ctx
}

// inArgsList reports whether the element just entered is directly in an
// extraArgs or extraEnvs list.
func (w *walker) inArgsList() bool {
	n := len(w.frames)
	return n >= 2 && w.frames[n-1].elem && !w.frames[n-2].elem && isExtraArgs(w.frames[n-2].name)
}

// nameUnkeyedArg records on the element just entered, an entry of an
// extraArgs or extraEnvs list compared by index (no list key), the first
// of names (the entry's name on each side) that names a secret: the
// entry's name is not on its path, and secretPath needs it. Elements'
// frames have no other use for a name.
func (w *walker) nameUnkeyedArg(names ...string) {
	for _, n := range names {
		if secretName(n) {
			w.frames[len(w.frames)-1].name = n
			return
		}
	}
}

// entryName is the "name" of the i-th element of an unstructured list, if
// it has one.
func entryName(l []any, i int) string {
	if i < len(l) {
		if m, ok := l[i].(map[string]any); ok {
			n, _ := m["name"].(string)
			return n
		}
	}
	return ""
}

// typedEntryName is the Name field of the i-th element of a typed list, if
// it has one.
func typedEntryName(l reflect.Value, i int) string {
	if !l.IsValid() || (l.Kind() != reflect.Slice && l.Kind() != reflect.Array) || i >= l.Len() {
		return ""
	}
	e := l.Index(i)
	for e.Kind() == reflect.Pointer || e.Kind() == reflect.Interface {
		if e.IsNil() {
			return ""
		}
		e = e.Elem()
	}
	if e.Kind() != reflect.Struct {
		return ""
	}
	if f := e.FieldByName("Name"); f.IsValid() && f.Kind() == reflect.String {
		return f.String()
	}
	return ""
}

// redactNamed returns v with the values secretPath would call secret
// replaced by their digest. v is JSON data and is not modified: changed
// maps and lists are copies.
func redactNamed(v any, ctx secretCtx) any {
	switch x := v.(type) {
	case map[string]any:
		var out map[string]any
		set := func(k string, r any) {
			if out == nil {
				out = maps.Clone(x)
			}
			out[k] = r
		}
		for k, e := range x {
			switch {
			case e == nil || isRedacted(e):
			case secretName(k), ctx.inFiles && isContent(k):
				set(k, Redact(e))
			case isCommands(k):
				if l, ok := e.([]any); ok {
					set(k, mapElems(l, func(c any) any {
						if c == nil || isRedacted(c) {
							return c
						}
						return Redact(c)
					}))
				} else {
					set(k, Redact(e))
				}
			default:
				r := redactNamed(e, secretCtx{inFiles: ctx.inFiles || isFiles(k), inExtraArgs: isExtraArgs(k)})
				if !sameData(r, e) {
					set(k, r)
				}
			}
		}
		if ctx.inExtraArgs {
			// An extraArgs or extraEnvs entry of the list form: {name: ...,
			// value: ...}.
			if n, ok := x["name"].(string); ok && secretName(n) && x["value"] != nil && !isRedacted(x["value"]) {
				set("value", Redact(x["value"]))
			}
		}
		if out != nil {
			return out
		}
	case []any:
		return mapElems(x, func(e any) any { return redactNamed(e, ctx) })
	}
	return v
}

// mapElems returns x with f applied to each element, copying x only when
// an element changes (sameData), and x itself when none does.
func mapElems(x []any, f func(any) any) []any {
	var out []any
	for i, e := range x {
		if r := f(e); !sameData(r, e) {
			if out == nil {
				out = slices.Clone(x)
			}
			out[i] = r
		}
	}
	if out == nil {
		return x
	}
	return out
}
