// Package gatereport asks an in-place extension what its gates (a
// maintenance window, a soak, a concurrency limit, blockers) would say now
// about the machines of a cluster, without taking anything: no
// concurrency slot is held, no update starts.
//
// The extension serves the report beside Cluster API's hooks, on the
// same TLS server (NewHandler, which extensionserver registers at Path);
// a client asks it with Post, as the preview does before a change is
// applied. Every machine named in a Request is read from the management
// cluster and must belong to the cluster named, before any gate is asked.
//
// It is not a hook of Cluster API's, and not an authorization: the
// report is what UpdateMachine's gates answer at this moment, and they
// may answer differently when Cluster API calls UpdateMachine (a window
// closes, another replica takes the last slot).
package gatereport
