// Package timeline draws a rollout as one self-contained HTML page with an
// SVG: a time axis, a lane per group with a bar per batch, and a lane per
// machine with a bar per step, marks for failures (✗), rollbacks (↶),
// runner crashes, retries (×N) and machines the rollout would wait at
// (‖); a failed machine that stalls its group (simulator.FailurePolicyStall) gets a
// grey bar from its failure to the end, in its lane and its group's. Labels go inside bars only where they fit; the tooltips say the
// rest. Above 60 machines only those where something other than success
// happened get a lane, and the page says how many are summarised by their
// group.
//
// It draws a simulator.Result: what the simulator did (examples/simulate
// --timeline), or a preview's estimate laid out as one
// (examples/preview --timeline). The pictures are checked in a headless
// browser for overlapping text (examples/simulate's TestTimelineInABrowser).
//
// It is not a chart library: the geometry is fixed (1,200 pixels wide)
// and nothing is interactive beyond tooltips.
package timeline
