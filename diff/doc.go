// Package diff answers one question: what exactly differs between the
// machine we have and the machine we want?
//
// A machine is three objects (a State): the Cluster API Machine, its
// bootstrap config (a KubeadmConfig) and its infrastructure machine (an
// AWSMachine, DockerMachine...). Each may be a typed Go struct,
// *unstructured.Unstructured, map[string]any, raw JSON or a
// runtime.RawExtension as CAPI's runtime hooks deliver it; the result does
// not depend on the form. Machines compares two machines, Templates compares
// machine templates (MachineSet/MachineDeployment spec.template with the
// bootstrap and infrastructure templates), Objects compares one object and
// Equal answers yes or no without building a change set.
//
// The result is a ChangeSet: an ordered, deterministic list of Change
// values, each with the object, an RFC 6901 pointer, a readable path that
// names list elements by key (bootstrap.spec.files[path=/etc/motd].content),
// the operation, the old and new values and a Category (Kubernetes version,
// files, kubelet configuration, infrastructure image...). From a change set,
// or the subset a strategy accepts, JSONPatch and MergePatch build the
// RFC 6902 and RFC 7386 patches CAPI's CanUpdateMachine and
// CanUpdateMachineSet responses carry, against the current object's spec.
//
// What is compared: spec, metadata.labels and metadata.annotations; never
// status or the rest of metadata. Empty strings, lists and objects equal
// absent ones (as omitempty makes them on the wire); 0 and false do not.
// StrictEmpty turns that off at given paths or, without patterns,
// everywhere: then "", [], {} and null differ from absent, as they do for
// go-cmp on JSON data, and patches write them exactly (InPlaceUpdate does
// this, as Cluster API compares strictly after an in-place extension's
// patches; tested against Cluster API's own code). Numbers are compared by
// value, so 8 equals 8.0; StrictNumbers makes an integer differ from a
// float, as go-cmp tells an int64 from a float64 in unstructured content
// (raw JSON is decoded as Kubernetes decodes it: 8 is an integer, 8.0 and
// 8e0 floats), and patches then write floats in a float form ("8.0");
// InPlaceUpdate includes it. Lists with a natural key (files by path, users
// by name, kubelet arguments by name, taints by key and effect...) are
// matched by key, so one inserted file is one added file; other lists are
// matched by index.
//
// Behaviour is tuned by composable options, as with go-cmp: Ignore, ListKey,
// ListIndex, StrictEmpty, StrictNumbers, Default, OrderedLists, Sensitive,
// Categorize, Transform, ShowSecrets, MaxDepth. Presets reproduce Cluster API's own
// rules: MachineDeploymentRollout (what makes a MachineDeployment roll),
// KubeadmControlPlane (what makes a control plane machine out of date),
// InPlaceUpdate (what CAPI compares after an in-place extension's patches)
// and InPlaceProposal (InPlaceUpdate for a desired machine you built, with
// the provider-assigned fields of AssignedPaths ignored). Without options
// every field counts, provider-assigned ones included: use a preset to ask
// what Cluster API will do.
// Compile options once with New and reuse the Differ.
//
// File contents, passwords, SSH keys and tokens are never printed in full by
// String, JSON or Change.Shown: a short digest (Redact) stands in, unless
// ShowSecrets is given. Two rules decide what is secret: the Sensitive
// paths (DefaultSensitive among the defaults), and a policy by name that no
// option but ShowSecrets turns off (WithoutDefaults keeps it): any field
// named, in any case, like a password, passwd, secret, token, userData,
// private key, SSH authorized keys or credential (references such as
// secretRef or secretName are not), file contents under any "files" field
// (a list, or a map in a schema-invalid object), extraArgs and extraEnvs
// values whose name is such a name (oidc-client-secret,
// AWS_SECRET_ACCESS_KEY; keyed by name or compared by index), and every
// command of
// preKubeadmCommands, postKubeadmCommands and bootCommands (shell text
// carries credentials in shapes no name finds). Change.Old and New keep
// the real values for patches.
//
// What it is not: a general-purpose deep-equality library for tests (use
// go-cmp), nor a strategic-merge or server-side-apply engine. It never
// panics on input: nil objects, mismatched kinds, values with no JSON form,
// cyclic or absurdly deep values are an *Error naming the object and path,
// matched with errors.Is against ErrNilObject, ErrKindMismatch,
// ErrWrongKind, ErrUnsupportedValue, ErrTooDeep, ErrInvalidJSON.
//
// Speed: typed inputs are walked with reflection through cached per-type
// plans, so an equal pair allocates nothing; see BENCHMARKS.md for the
// figures against go-cmp and equality.Semantic.
package diff
