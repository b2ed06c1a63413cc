package tour

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/upgradekit/upgradekit/amiselect"
	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/drift"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
)

// README:begin WhatChanged

// WhatChanged prints what differs between the machine we have and the one
// we want (Machine, bootstrap config, infrastructure machine), compared as
// Cluster API's in-place check will (diff.InPlaceProposal: the providerID,
// instance ID and object names a provider gave the running machine are not
// changes), and returns the changes and the bootstrap config's JSON patch
// for everything but the machine image: what a CanUpdateMachine answer
// carries.
func WhatChanged(current, desired diff.State) (diff.ChangeSet, []byte, error) {
	cs, err := diff.Machines(current, desired, diff.InPlaceProposal())
	if err != nil {
		return cs, nil, err
	}
	fmt.Println(cs)
	inPlace := cs.Filter(func(c diff.Change) bool { return c.Category != diff.CategoryImage })
	patch, err := inPlace.JSONPatch(diff.ObjectBootstrap)
	return cs, patch, err
}

// README:end

// README:begin WouldDrift

// WouldDrift stamps nodes with the pool template they were made from (as a
// controller does when it creates them), then says which would drift if the
// template became proposed, and why, field by field.
func WouldDrift(ctx context.Context, nodes []corev1.Node, template, proposed map[string]any) error {
	hasher, err := drift.NewHasher("v1")
	if err != nil {
		return err
	}
	stamper, err := drift.NewStamper("example.com", hasher)
	if err != nil {
		return err
	}
	objs := make([]metav1.Object, len(nodes))
	for i := range nodes {
		if _, err := stamper.Stamp(&nodes[i], template); err != nil {
			return err
		}
		objs[i] = &nodes[i]
	}
	report, err := stamper.DryRun(ctx, proposed, objs)
	if err != nil {
		return err
	}
	fmt.Printf("%d of %d nodes would drift\n", report.Drifted, report.Total)
	for _, o := range report.Objects {
		for _, r := range o.Reasons {
			var fields []string
			for _, e := range r.Evidence {
				if e.Kind == drift.EvidenceKindField {
					fields = append(fields, e.Key)
				}
			}
			fmt.Println(o.Name, r.Name, strings.Join(fields, ", "))
		}
	}
	return nil
}

// README:end

// README:begin NodeImage

// NodeImage resolves Karpenter-style amiSelectorTerms against source (a
// catalog, or the AWS adapter in amiselect/aws): the image a new amd64
// node gets, only once it is a week old, and whether a node running
// currentImageID has drifted.
func NodeImage(ctx context.Context, source amiselect.ImageSource, currentImageID string) error {
	res, err := amiselect.Resolve(ctx, source, []amiselect.Term{{Alias: "al2023@latest"}},
		amiselect.WithKubernetesVersion("1.36"), amiselect.WithMinAge(7*24*time.Hour))
	if err != nil {
		return err
	}
	reqs := amiselect.Requirements{Architecture: amiselect.ArchAMD64}
	img, ok := res.ImageFor(reqs)
	if !ok {
		return fmt.Errorf("no image for %v", reqs)
	}
	fmt.Println("a new amd64 node gets", img.ID)
	drifted, reason := res.IsDrifted(currentImageID, reqs)
	fmt.Println("drifted:", drifted, reason)
	return nil
}

// README:end

// README:begin UpgradeNode

// UpgradeNode prepares a control plane node's upgrade from v1.35.4 to
// v1.36.3: the kubeadm plan, the privileged upgrader pod that runs it
// through nsenter (image: a bundle with the new binaries under /staging),
// then cordons the node (recording that we did, so we never uncordon
// someone else's cordon) and drains it. Create the pod with cs next;
// nodepod.ReadStatus follows it step by step.
func UpgradeNode(ctx context.Context, cs kubernetes.Interface, node, image string) (*corev1.Pod, error) {
	plan, err := kubeadm.NewPlan(kubeadm.Config{Node: node, Role: kubeadm.RoleFirstControlPlane,
		FromVersion: "v1.35.4", ToVersion: "v1.36.3"})
	if err != nil {
		return nil, err
	}
	pod, err := nodepod.Build(plan, nodepod.WithImage(image), nodepod.WithStageFrom("/staging"))
	if err != nil {
		return nil, err
	}
	if _, err := drain.Cordon(ctx, cs, node, "my-upgrader"); err != nil {
		return nil, err
	}
	// A *drain.DrainError names the pods left and the PodDisruptionBudgets
	// blocking them.
	if _, err := drain.Drain(ctx, cs, node); err != nil {
		return nil, err
	}
	return pod, nil
}

// README:end

// README:begin PlanRollout

// PlanRollout previews a whole cluster's rollout: in place where the
// kubeadm plans cover the change (version, files), otherwise a rolling
// replacement; control planes first, one at a time, then workers under
// their rollout limits, the first worker batch a canary of at most 2
// machines, and a stop after 3 failures.
func PlanRollout(ctx context.Context, cluster strategy.Cluster) error {
	kubeadmUpdater, err := strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...)
	if err != nil {
		return err
	}
	files, err := strategy.ForPaths("files", strategy.FilesPaths()...)
	if err != nil {
		return err
	}
	rolling, err := strategy.RollingReplaceStrategy(strategy.RollingUpdate{})
	if err != nil {
		return err
	}
	fallback, err := strategy.FallbackStrategy(rolling) // in place when covered, else replace
	if err != nil {
		return err
	}
	planner, err := strategy.NewPlanner(strategy.PlannerOptions{Decider: strategy.Updaters(kubeadmUpdater, files),
		Strategy: fallback, Canary: 2, MaxFailures: 3})
	if err != nil {
		return err
	}
	plan, err := planner.Plan(ctx, cluster)
	if err != nil {
		return err
	}
	return plan.WriteTable(os.Stdout)
}

// README:end

// README:begin AddExtension

// AddExtension adds Cluster API's in-place update extension to a
// provider's manager: CanUpdateMachine and CanUpdateMachineSet accept only
// what UpdateMachine applies and verifies; UpdateMachine checks each
// request against the live Machine, drains the node and runs the kubeadm
// plan in an upgrader pod with the bundle of opts.UpgraderImage (or the
// target version's image in opts.Images), its files checked against the
// checksums opts give (BundleChecksums or BundleChecksumsDir). mgr.Start
// serves it over TLS (by default on port 9443 from
// extensionserver.DefaultCertDir; opts may say otherwise, as a provider's
// flags would).
func AddExtension(mgr ctrl.Manager, opts extensionserver.Options) error {
	if opts.EventRecorder == nil {
		opts.EventRecorder = mgr.GetEventRecorder("upgradekit")
	}
	ext, err := extensionserver.New(mgr.GetClient(), opts)
	if err != nil {
		return err
	}
	return mgr.Add(ext)
}

// README:end

// README:begin Simulate

// Simulate rolls a fake cluster (3 control planes, 5 workers) from v1.35.4
// to v1.36.2 on simulated hosts that run the real kubeadm plans, with the
// upgrader crashing on one worker mid-step, and checks the invariants (skew,
// disruption limits, cordons, no step run twice).
func Simulate(ctx context.Context) error {
	cl := simulator.NewCluster("demo").ControlPlane(3, "v1.35.4").MachineDeployment("md-0", 5, "v1.35.4")
	faults := simulator.NewFaults(1).CrashRunner("demo-md-0-2", "kubelet", simulator.CrashPointDuring)
	sim, err := simulator.NewSimulator(cl, simulator.Options{Faults: faults})
	if err != nil {
		return err
	}
	res, err := sim.Run(ctx, simulator.Rollout{ToVersion: "v1.36.2"})
	if err != nil {
		return err
	}
	fmt.Println("batches:", len(res.Plan.Batches), "failed:", len(res.Failed), "runner restarts:", res.Restarts)
	fmt.Println("violations:", res.Violations)
	return nil
}

// README:end
