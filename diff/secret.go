package diff

import (
	"maps"
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
//   - the value of an extraArgs entry whose argument name is such a name
//     (oidc-client-secret, token-auth-file is not: see secretName), as a
//     list of {name, value} or as a map.
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

func isExtraArgs(name string) bool {
	return len(name) >= 9 && strings.EqualFold(name[len(name)-9:], "extraargs")
}

// secretCtx is where a value sits, for redacting by name below it.
type secretCtx struct {
	inFiles     bool // below a field named files
	inExtraArgs bool // directly in an extraArgs list or map
}

// secretPath reports whether the current path names a secret, and the
// context for the values below it.
func (w *walker) secretPath() (bool, secretCtx) {
	var ctx secretCtx
	for _, f := range w.frames {
		if f.elem {
			if ctx.inExtraArgs && f.key > 0 && secretName(string(w.keyed[f.key-1].appendSelector(nil))) {
				return true, ctx
			}
			ctx.inExtraArgs = false
			continue
		}
		switch {
		case ctx.inFiles && isContent(f.name):
			return true, ctx
		case secretName(f.name):
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
			default:
				r := redactNamed(e, secretCtx{inFiles: ctx.inFiles || isFiles(k), inExtraArgs: isExtraArgs(k)})
				if !sameData(r, e) {
					set(k, r)
				}
			}
		}
		if ctx.inExtraArgs {
			// An extraArgs entry of the list form: {name: ..., value: ...}.
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
