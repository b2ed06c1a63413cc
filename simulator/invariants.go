package simulator

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/strategy"
)

// The invariant checks below are what the Simulator verifies after every
// run; they are exported so a test that drives its own rollout over a fake
// cluster (its own controller, its own executor) can check the same
// things. Each returns one line per violation, nil when the invariant
// holds.

// CheckSkew reports workers whose kubelet is a newer minor than the oldest
// control plane kubelet: Kubernetes' version skew policy never allows a
// kubelet newer than the API server. Roles come from cl; the versions
// from the Nodes c holds.
func CheckSkew(ctx context.Context, c client.Reader, cl *Cluster) []string {
	if c == nil || cl == nil {
		return []string{"skew: nil client or cluster"}
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return []string{fmt.Sprintf("skew: listing nodes: %v", err)}
	}
	roles := map[string]strategy.Role{}
	for _, n := range cl.Nodes() {
		roles[n.Name] = n.Role
	}
	versions := map[string]string{}
	var names []string
	for _, n := range nodes.Items {
		versions[n.Name] = n.Status.NodeInfo.KubeletVersion
		names = append(names, n.Name)
	}
	return skewViolations(0, oldestControlPlane(versions, roles), versions, roles, names)
}

// oldestControlPlane returns the oldest control plane kubelet version in
// versions, or nil.
func oldestControlPlane(versions map[string]string, roles map[string]strategy.Role) *version.Version {
	var oldest *version.Version
	for n, s := range versions {
		if roles[n] != strategy.RoleControlPlane {
			continue
		}
		if v, err := version.ParseSemantic(s); err == nil && (oldest == nil || v.LessThan(oldest)) {
			oldest = v
		}
	}
	return oldest
}

// skewViolations checks the named workers against oldest, the oldest
// control plane kubelet; batch 0 means "at the end".
func skewViolations(batch int, oldest *version.Version, versions map[string]string, roles map[string]strategy.Role, names []string) []string {
	if oldest == nil {
		return nil
	}
	when := "at the end"
	if batch > 0 {
		when = fmt.Sprintf("after batch %d", batch)
	}
	var out []string
	for _, n := range names {
		v, err := version.ParseSemantic(versions[n])
		if err != nil || roles[n] != strategy.RoleWorker {
			continue
		}
		if v.Major() > oldest.Major() || (v.Major() == oldest.Major() && v.Minor() > oldest.Minor()) {
			out = append(out, fmt.Sprintf("%s: worker %s runs %s, newer than control plane %s", when, n, v, oldest))
		}
	}
	return out
}

// CheckDisruption reports groups that had more machines disrupted at the
// same virtual time than res.Limits allows (the control plane, group "",
// one at a time). A machine is disrupted from the start of its first
// timeline event to the end of its last, or to res.End when it was left
// cordoned.
func CheckDisruption(res *Result) []string {
	if res == nil || res.Plan == nil {
		return nil
	}
	group := map[string]string{}
	for _, pm := range res.Plan.Machines {
		group[pm.Machine] = pm.Group
	}
	spans := machineSpans(res.Events, nil)
	type edge struct {
		at    time.Time
		delta int
	}
	for _, m := range res.LeftCordoned {
		if sp, ok := spans[m]; ok && res.End.After(sp.end) {
			sp.end = res.End
		}
	}
	edges := map[string][]edge{}
	for m, sp := range spans {
		g := group[m]
		edges[g] = append(edges[g], edge{sp.start, +1}, edge{sp.end, -1})
	}
	groups := make([]string, 0, len(edges))
	for g := range edges {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	var out []string
	for _, g := range groups {
		es := edges[g]
		// Ends before starts at the same instant: a machine that finishes
		// as the next begins does not overlap it.
		sort.Slice(es, func(i, j int) bool {
			if !es[i].at.Equal(es[j].at) {
				return es[i].at.Before(es[j].at)
			}
			return es[i].delta < es[j].delta
		})
		limit, ok := res.Limits[g]
		if !ok {
			limit = 1
		}
		cur, peak := 0, 0
		var at time.Time
		for _, e := range es {
			cur += e.delta
			if cur > peak {
				peak, at = cur, e.at
			}
		}
		if peak > limit {
			name := g
			if name == "" {
				name = "control plane"
			}
			out = append(out, fmt.Sprintf("%s: %d machines disrupted at once at %s, limit %d", name, peak, at.Format(time.RFC3339), limit))
		}
	}
	return out
}

// CheckNoRerun reports steps run again on a machine after they had
// completed: the journal must make a resumed runner pass over completed
// steps. A step may run again only when the runner crashed during it
// (its completion never reached the journal).
func CheckNoRerun(res *Result) []string {
	if res == nil {
		return nil
	}
	type key struct{ machine, step string }
	done := map[key]bool{}
	var out []string
	for _, e := range res.Executions {
		if e.Phase != nodeexec.PhaseRun {
			continue
		}
		k := key{e.Machine, e.Step}
		if done[k] {
			out = append(out, fmt.Sprintf("%s: step %s ran again after it had completed", e.Machine, e.Step))
		}
		if e.ExitCode == 0 && !e.Crashed {
			done[k] = true
		}
	}
	return out
}

// CheckCordons reports nodes left unschedulable by the rollout (other than
// res.LeftCordoned, left on purpose after a failure), nodes in
// res.CordonedBefore made schedulable (someone else's cordon lifted), and
// cordon records of ours left behind on schedulable nodes.
func CheckCordons(ctx context.Context, c client.Reader, res *Result) []string {
	if res == nil {
		return nil
	}
	if c == nil {
		return []string{"cordons: nil client"}
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return []string{fmt.Sprintf("cordons: listing nodes: %v", err)}
	}
	var out []string
	for _, n := range nodes.Items {
		before := slices.Contains(res.CordonedBefore, n.Name)
		left := slices.Contains(res.LeftCordoned, n.Name)
		switch {
		case before && !n.Spec.Unschedulable:
			out = append(out, fmt.Sprintf("node %s was cordoned by someone else before the rollout and is schedulable now", n.Name))
		case !before && !left && n.Spec.Unschedulable:
			out = append(out, fmt.Sprintf("node %s was left cordoned", n.Name))
		}
		var rec drain.CordonRecord
		if raw, ok := n.Annotations[drain.AnnotationCordon]; ok && !left &&
			json.Unmarshal([]byte(raw), &rec) == nil && rec.Owner == simulatorCordonOwner {
			out = append(out, fmt.Sprintf("node %s still carries the simulator's cordon record", n.Name))
		}
	}
	return out
}

// CheckBreaker reports a circuit breaker that did not hold: a group with
// more than b's limit of failed or unhealthy machines whose breaker did
// not trip, and a machine of a tripped group that started after the
// machine that tripped it (every machine's events run in the order they
// were started). Group sizes are read from the plan.
func CheckBreaker(res *Result, b strategy.Breaker) []string {
	if res == nil || res.Plan == nil {
		return nil
	}
	group := map[string]string{}
	sizes := map[string]int{}
	for _, pm := range res.Plan.Machines {
		group[pm.Machine] = pm.Group
		sizes[pm.Group]++
	}
	bad := map[string]int{}
	for _, m := range res.Failed {
		bad[group[m]]++
	}
	for _, m := range res.Unhealthy {
		bad[group[m]]++
	}
	trips := map[string]BreakerTrip{}
	for _, t := range res.Breakers {
		trips[t.Group] = t
	}
	var out []string
	for g, n := range bad {
		limit, err := b.Limit(sizes[g])
		if err == nil && n > limit {
			if _, ok := trips[g]; !ok {
				out = append(out, fmt.Sprintf("group %q: %d of %d machines bad, more than %d, and the breaker did not trip", g, n, sizes[g], limit))
			}
		}
	}
	first, last := map[string]int{}, map[string]int{}
	for i, e := range res.Events {
		if e.Step == StallStep {
			continue // emitted at the end: the machine's work ended before
		}
		if _, ok := first[e.Machine]; !ok {
			first[e.Machine] = i
		}
		last[e.Machine] = i
	}
	for g, t := range trips {
		if t.Bad != t.Limit+1 {
			out = append(out, fmt.Sprintf("group %q: the breaker tripped at %d bad machines, not at the first above its limit %d", g, t.Bad, t.Limit))
		}
		end, ok := last[t.After]
		if !ok {
			continue
		}
		for m, i := range first {
			if group[m] == g && m != t.After && i > end {
				out = append(out, fmt.Sprintf("group %q: machine %s started after the breaker tripped on %s", g, m, t.After))
			}
		}
	}
	sort.Strings(out)
	return out
}

// CheckStall reports machines started where Cluster API would have
// stalled after a failure (FailurePolicyStall, the default; nil for a Result of
// FailurePolicyContinue): a machine of a group started while the group's
// failed machines, which Cluster API keeps Updating and unavailable, and
// the machines still running used up its limit (res.Limits: maxSurge +
// maxUnavailable, 1 when missing); and any machine started after a
// control plane machine failed (KubeadmControlPlane waits for the failed
// update, the workers behind it). A machine's failure counts from the end
// of its last event (StallStep events aside); groups and failures come
// from every plan of res.
func CheckStall(res *Result) []string {
	if res == nil || res.OnFailure == FailurePolicyContinue {
		return nil
	}
	group := map[string]string{}
	for _, p := range append([]*strategy.RolloutPlan{res.Plan}, res.Plans...) {
		if p == nil {
			continue
		}
		for _, pm := range p.Machines {
			group[pm.Machine] = pm.Group
		}
	}
	spans := machineSpans(res.Events, func(e Event) bool { return e.Step == StallStep })
	failed := map[string]bool{}
	for _, m := range res.Failed {
		if _, ok := spans[m]; ok {
			failed[m] = true
		}
	}
	// Sorted once: machines, the failed ones, and each group's.
	names := slices.Sorted(maps.Keys(spans))
	var failedNames []string
	members := map[string][]string{}
	for _, o := range names {
		if failed[o] {
			failedNames = append(failedNames, o)
		}
		members[group[o]] = append(members[group[o]], o)
	}
	var out []string
	for _, m := range names {
		start, g := spans[m].start, group[m]
		down := 0
		for _, o := range failedNames {
			sp := spans[o]
			if o == m || sp.end.After(start) {
				continue
			}
			if group[o] == "" {
				out = append(out, fmt.Sprintf("%s started at %s, after control plane machine %s failed at %s",
					m, start.Format(time.RFC3339), o, sp.end.Format(time.RFC3339)))
			}
			if group[o] == g && g != "" {
				down++
			}
		}
		if down == 0 {
			continue
		}
		// Running at m's start: begun by then, not ended (a failed machine
		// that ended by then counted as down above).
		running := 0
		for _, o := range members[g] {
			if sp := spans[o]; o != m && !sp.start.After(start) && sp.end.After(start) {
				running++
			}
		}
		limit, ok := res.Limits[g]
		if !ok {
			limit = 1
		}
		if down+running+1 > limit {
			name := "group " + g
			if g == "" {
				name = "the control plane"
			}
			out = append(out, fmt.Sprintf("%s started at %s while %d failed machines of %s stay unavailable and %d run; the limit is %d",
				m, start.Format(time.RFC3339), down, name, running, limit))
		}
	}
	return out
}

// span is when a machine's events begin and end.
type span struct{ start, end time.Time }

// machineSpans returns, per machine, the span of its events, leaving out
// those skip reports (nil: none).
func machineSpans(events []Event, skip func(Event) bool) map[string]*span {
	spans := map[string]*span{}
	for _, e := range events {
		if skip != nil && skip(e) {
			continue
		}
		sp, ok := spans[e.Machine]
		if !ok {
			spans[e.Machine] = &span{e.Start, e.End}
			continue
		}
		if e.Start.Before(sp.start) {
			sp.start = e.Start
		}
		if e.End.After(sp.end) {
			sp.end = e.End
		}
	}
	return spans
}
