// Package memclient is an in-memory API server behind a controller-runtime
// client.WithWatch, for the simulator: what controller-runtime's fake
// client does, without its JSON round trip per call. Objects are stored as
// the scheme's Go types (or *unstructured.Unstructured for kinds the
// scheme registers as unstructured or does not know) and handed out as
// deep copies, both ways: nothing a caller holds aliases what is stored,
// and a stored object is never changed in place (a write replaces it), so
// reads copy outside the lock.
//
// It keeps these semantics of a real kube-apiserver, which the simulator
// and the code it drives depend on (conformance_test.go runs the same
// operations against a real kube-apiserver through envtest and against
// controller-runtime's fake client, and compares):
//
//   - Get, List, Create, Update, Patch, Delete and DeleteAllOf, with
//     apimachinery's typed errors: NotFound, AlreadyExists, Conflict (409)
//     for a stale metadata.resourceVersion in an Update or a Patch that
//     carries one, or a failed UID or resourceVersion precondition of a
//     Delete; Invalid for a Create without name or generateName, or an Update without
//     resourceVersion of a kind that is not built into Kubernetes (custom
//     resources need one, as on a real server); for a Create that sets
//     resourceVersion, the 500 without a reason kube-apiserver answers.
//   - One resourceVersion counter for the whole store, as etcd's revision:
//     every write that changes an object gives it the next value; a write
//     that changes nothing (an Update or Patch to what is stored) changes
//     nothing, resourceVersion included, as on a real server.
//   - Create sets uid (deterministic: derived from the object's key and
//     the store's revision, so a seeded simulation is reproducible) and
//     creationTimestamp (from Options.Clock, to the second); Update and
//     Patch keep both, and deletionTimestamp, from the stored object.
//   - Status subresources for the kinds in Options.StatusSubresource:
//     Create drops status (but a Node's, as a kubelet registers it with
//     one), Update and Patch keep the stored status, and Status().Update /
//     Status().Patch change status and, per kind, as Kubernetes' status
//     strategies do: for Nodes and PodDisruptionBudgets also labels,
//     annotations, finalizers and owner references; for Pods labels,
//     annotations and finalizers (the stored owner references stay); for
//     every other kind, custom resources among them, nothing else.
//     Status() on a kind without one is NotFound.
//   - Delete of an object with finalizers sets deletionTimestamp; an
//     Update or Patch that removes the last finalizer of such an object
//     deletes it, and one that adds a finalizer to it is Invalid.
//     DeleteAllOf of a namespaced kind needs a namespace (405
//     MethodNotAllowed without).
//   - A request on an object without a name, or a Create of a
//     namespaced kind without a namespace, fails with client-go's error,
//     as it does before any request is sent.
//   - A Patch cannot change an object's name or namespace (BadRequest) or
//     its apiVersion or kind (Invalid); a patch's field names are
//     case-sensitive.
//   - Create, Update and Status().Update of a PartialObjectMetadata fail
//     with controller-runtime's client's errors.
//   - A typed read of a kind stored as unstructured, and an unstructured
//     read of a typed kind, convert (runtime.DefaultUnstructuredConverter),
//     as the API server serves either.
//   - TypeMeta as controller-runtime's clients leave it: empty on typed
//     objects (but Update and Patch restore what the caller had set), set
//     on unstructured ones and on PartialObjectMetadata.
//   - List sorts by namespace + "/" + name (etcd's key order) and filters by
//     namespace, label selector and the metadata.name and
//     metadata.namespace field selectors.
//   - Merge, JSON and strategic merge patches (the last only for the
//     scheme's Go types, as a real server refuses it for custom resources
//     with 415 Unsupported Media Type).
//   - DryRunAll writes nothing: Create reports AlreadyExists and answers
//     the object it would store (name, uid, creationTimestamp; no
//     resourceVersion), Update, Patch and Delete NotFound and conflicts,
//     as they would.
//
// It does not model, and tests that need them should use envtest
// (harness/apiserver): validation and defaulting (a Pod without
// containers is created; no Pod gets phase Pending, no default is filled
// in); admission, webhooks, quotas; metadata.generation (never set or
// bumped); managedFields and server-side apply (Apply fails); graceful
// deletion (a Pod is deleted at once, whatever its grace period) and
// garbage collection of dependents (every propagation policy deletes at
// once: a Foreground deletion, which kube-apiserver holds behind the
// foregroundDeletion finalizer until the garbage collector has deleted
// the dependents, is not held); namespaces (an object may be created
// in a namespace that does not exist, and deleting a Namespace deletes
// nothing else); create-on-update; API versions (an object is stored
// and served at the version it was written with: reading another version
// of the kind is NotFound); pagination (List ignores Limit and Continue,
// and returns everything, as controller-runtime's fake client does);
// Watch; subresources other than status (eviction, scale, token), which
// fail with an error wrapping errors.ErrUnsupported.
package memclient
