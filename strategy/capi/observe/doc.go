// Package observe names what upgradekit's Cluster API in-place extension
// shows of its work, for alerts, dashboards and scripts:
//
//   - the Node condition ConditionInPlaceUpdate and its Reason* values,
//     which are also the "phase" label of MetricMachinesInProgress;
//   - the Failure* reasons: the first word of a Failure answer's message
//     and the "reason" label of MetricFailures;
//   - the EventReason* reasons of the Events on Machines and their owners;
//   - the Metric* names and the Hook* values of their "outcome" label;
//   - the Node annotation AnnotationInPlaceUpdate and the UpdateRecord it
//     holds while an update runs.
//
// The names are stable: a change is a breaking change in the CHANGELOG.
// The package only names them; package strategy/capi writes them
// (capi.MachineUpdater, capi.Extension) and registers the metrics
// (capi.NewMetrics). It imports nothing of upgradekit, so a tool that
// reads a cluster's state need not import the extension.
package observe
