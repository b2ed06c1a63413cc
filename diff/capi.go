package diff

import (
	"fmt"

	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

// Presets reproducing Cluster API v1.14's own "is this machine up to date"
// rules, so a strategy sees exactly the changes CAPI acts on. They are plain
// Options: combine them with your own.

// MachineDeploymentRollout is CAPI's MachineDeployment/MachineSet rule
// (mdutil.MachineTemplateUpToDate): labels, annotations, clusterName,
// providerID, minReadySeconds, readinessGates, deletion timeouts and taints
// are propagated in place and never cause a rollout. CAPI decides by
// template reference, not template content, so the bootstrap and
// infrastructure templates' contents are ignored too: a new template name
// in machine.spec.bootstrap.configRef or machine.spec.infrastructureRef is
// the change.
func MachineDeploymentRollout() Option {
	return Options{
		Ignore(
			"machine.metadata",
			"machine.spec.clusterName",
			"machine.spec.providerID",
			"machine.spec.minReadySeconds",
			"machine.spec.readinessGates",
			"machine.spec.deletion",
			"machine.spec.taints",
			"bootstrap.metadata", "bootstrap.spec",
			"infrastructure.metadata", "infrastructure.spec",
		),
	}
}

// InPlaceUpdate is what CAPI compares after applying an in-place extension's
// patches (CanUpdateMachine / CanUpdateMachineSet): on the Machine only
// spec.version and spec.failureDomain (references, providerID, readiness
// gates, deletion timeouts and taints are cleaned up first), the whole spec
// of the bootstrap config and infrastructure machine, and no metadata.
// Lists are compared by index, as CAPI does. CAPI compares JSON data with
// go-cmp, so empty values are strict (StrictEmpty without patterns): ""
// against absent, [] against absent, {} against absent all differ, and the
// patches write the empty values or delete the fields, whichever desired
// has. (The typed Machine cannot tell "" from absent, its fields being
// omitempty, so neither does the comparison there.) CAPI decodes numbers
// into int64 or float64 and go-cmp tells them apart, so numbers are strict
// too (StrictNumbers): 8 against 8.0 differs, and the patches write floats
// in a float form and rewrite the integral floats of current's spec that
// CAPI's re-marshalling would turn into integers.
func InPlaceUpdate() Option {
	return Options{
		Ignore(
			"*.metadata",
			"machine.spec.clusterName",
			"machine.spec.bootstrap",
			"machine.spec.infrastructureRef",
			"machine.spec.providerID",
			"machine.spec.minReadySeconds",
			"machine.spec.readinessGates",
			"machine.spec.deletion",
			"machine.spec.taints",
		),
		OrderedLists(),
		StrictEmpty(),
		StrictNumbers(),
	}
}

// AssignedPaths are the fields Cluster API or a provider fills in for one
// particular machine once it exists, never a template or a user: the
// Machine's spec.providerID, the names of its own infrastructure machine
// and bootstrap config (spec.infrastructureRef.name,
// spec.bootstrap.configRef.name) and bootstrap data secret, and the
// infrastructure machine's spec.providerID and spec.instanceID (AWSMachine
// and others). A running machine has them and a machine you build from
// templates or a KubeadmControlPlane's spec does not, so a plain diff of
// the two reports them as changes that Cluster API never acts on: it
// drops them from the Machine before comparing and dry-runs the desired
// infrastructure machine onto the live one, which keeps them.
func AssignedPaths() []string {
	return []string{
		"machine.spec.providerID",
		"machine.spec.infrastructureRef.name",
		"machine.spec.bootstrap.configRef.name",
		"machine.spec.bootstrap.dataSecretName",
		"infrastructure.spec.providerID",
		"infrastructure.spec.instanceID",
	}
}

// IgnoreAssigned ignores AssignedPaths. InPlaceProposal includes it.
func IgnoreAssigned() Option { return Ignore(AssignedPaths()...) }

// InPlaceProposal compares a running machine with a machine you built
// yourself (from new templates, a KubeadmControlPlane's new spec, a
// fixture) as Cluster API's in-place check will: InPlaceUpdate's rules
// plus IgnoreAssigned, because the desired objects Cluster API sends an
// in-place extension carry the running machine's provider-assigned fields
// and yours do not. It is the preset for "can this machine be updated in
// place, and with which patches?" when desired does not come from a
// Cluster API request (for a request's objects, InPlaceUpdate is exact).
func InPlaceProposal() Option {
	return Options{InPlaceUpdate(), IgnoreAssigned()}
}

// KubeadmControlPlane is CAPI's KubeadmControlPlane rule for control plane
// machines (controlplane/kubeadm/pkg.UpToDate). kcpVersion is the KCP's
// spec.version; desired is a Machine with that version and a KubeadmConfig
// whose spec is the KCP's kubeadmConfigSpec.
//
//   - Machine: only spec.version counts. Labels, annotations, references,
//     failure domain, readiness gates, deletion timeouts and taints are
//     synced in place.
//   - KubeadmConfig: an init configuration (the first control plane machine)
//     is compared as the join configuration it would be, and, failing that,
//     as an init configuration against the KCP's (CAPI accepts either).
//     clusterConfiguration.controlPlaneEndpoint and dns,
//     joinConfiguration.discovery and the
//     controlPlaneComponentHealthCheckSeconds timeouts are ignored; format
//     defaults to cloud-config and imagePullPolicy to IfNotPresent;
//     ControlPlaneKubeletLocalMode defaults to true on the desired side for
//     1.31 <= kcpVersion < 1.36; empty lists equal absent ones except
//     nodeRegistration.taints, where [] means "no taints"; lists are
//     compared by index.
//   - Infrastructure machine: CAPI compares only which template it was
//     cloned from (see ClonedFromTemplate), never its content, so the
//     content is ignored here.
func KubeadmControlPlane(kcpVersion string) Option {
	kcpNorm := Options{
		Ignore(
			"bootstrap.metadata",
			"bootstrap.spec.clusterConfiguration.controlPlaneEndpoint",
			"bootstrap.spec.clusterConfiguration.dns",
			"bootstrap.spec.joinConfiguration.discovery",
			"bootstrap.spec.initConfiguration.timeouts.controlPlaneComponentHealthCheckSeconds",
			"bootstrap.spec.joinConfiguration.timeouts.controlPlaneComponentHealthCheckSeconds",
		),
		Default("bootstrap.spec.format", "cloud-config"),
		Default("bootstrap.spec.initConfiguration.nodeRegistration.imagePullPolicy", "IfNotPresent"),
		Default("bootstrap.spec.joinConfiguration.nodeRegistration.imagePullPolicy", "IfNotPresent"),
		StrictEmpty(
			"bootstrap.spec.initConfiguration.nodeRegistration.taints",
			"bootstrap.spec.joinConfiguration.nodeRegistration.taints",
			"bootstrap.spec.joinConfiguration.controlPlane",
		),
		OrderedLists(),
	}
	// The transform needs a comparison with the same rules to choose
	// between the join and the init comparison.
	inner, innerErr := New(kcpNorm)
	localMode := kubeletLocalModeDefault(kcpVersion)
	return Options{
		Ignore(
			"machine.metadata",
			"machine.spec.clusterName",
			"machine.spec.bootstrap",
			"machine.spec.infrastructureRef",
			"machine.spec.providerID",
			"machine.spec.failureDomain",
			"machine.spec.minReadySeconds",
			"machine.spec.readinessGates",
			"machine.spec.deletion",
			"machine.spec.taints",
			"infrastructure.metadata",
			"infrastructure.spec",
		),
		kcpNorm,
		Transform(ObjectBootstrap, "KubeadmControlPlane", func(cur, des map[string]any) error {
			if innerErr != nil {
				return innerErr
			}
			return kcpTransform(inner, localMode, cur, des)
		}),
	}
}

func kubeletLocalModeDefault(v string) bool {
	parsed, err := version.ParseSemantic(strings.TrimSpace(v))
	if err != nil {
		return false
	}
	base := version.MajorMinor(parsed.Major(), parsed.Minor())
	return !base.LessThan(version.MajorMinor(1, 31)) && base.LessThan(version.MajorMinor(1, 36))
}

// kcpTransform rewrites current and desired KubeadmConfigs (JSON data) the
// way CAPI's PrepareKubeadmConfigsForDiff does, choosing the join or the
// init comparison.
func kcpTransform(inner *Differ, localMode bool, cur, des map[string]any) error {
	curSpec := objAt(cur, "spec")
	desSpec := objAt(des, "spec")
	if localMode {
		cc := objAt(desSpec, "clusterConfiguration")
		fg := objAt(cc, "featureGates")
		if _, set := fg["ControlPlaneKubeletLocalMode"]; !set {
			fg["ControlPlaneKubeletLocalMode"] = true
		}
	}
	curJoin := objAt(curSpec, "joinConfiguration")
	isJoin := curJoin["controlPlane"] != nil || len(listAt(objAt(curJoin, "nodeRegistration"), "kubeletExtraArgs")) > 0
	if isJoin && curJoin["controlPlane"] == nil {
		curJoin["controlPlane"] = map[string]any{}
	}

	desJoinSpec, _ := deepCopyData(desSpec).(map[string]any)
	delete(desJoinSpec, "initConfiguration")
	dj := objAt(desJoinSpec, "joinConfiguration")
	if dj["controlPlane"] == nil {
		dj["controlPlane"] = map[string]any{}
	}

	if isJoin {
		replaceSpec(des, desJoinSpec)
		return nil
	}

	// Current is an init configuration: try it as a join configuration.
	convSpec, _ := deepCopyData(curSpec).(map[string]any)
	init := objAt(convSpec, "initConfiguration")
	join := map[string]any{}
	for _, k := range []string{"timeouts", "patches", "skipPhases", "nodeRegistration"} {
		if v, ok := init[k]; ok {
			join[k] = v
		}
	}
	cp := map[string]any{}
	if ep, ok := init["localAPIEndpoint"]; ok {
		cp["localAPIEndpoint"] = ep
	}
	join["controlPlane"] = cp
	if v, ok := dj["caCertPath"]; ok {
		join["caCertPath"] = v
	}
	if v, ok := objAt(convSpec, "joinConfiguration")["discovery"]; ok {
		join["discovery"] = v
	}
	delete(convSpec, "initConfiguration")
	convSpec["joinConfiguration"] = join

	eq, err := inner.Equal(
		State{Bootstrap: map[string]any{"spec": convSpec}},
		State{Bootstrap: map[string]any{"spec": desJoinSpec}},
	)
	if err != nil {
		return err
	}
	if eq {
		replaceSpec(cur, convSpec)
		replaceSpec(des, desJoinSpec)
		return nil
	}
	// Otherwise compare init against the KCP's init configuration (CAPI
	// reports this comparison's differences).
	delete(desSpec, "joinConfiguration")
	return nil
}

func replaceSpec(obj, spec map[string]any) { obj["spec"] = spec }

// objAt returns m[k] as an object, creating it when absent.
func objAt(m map[string]any, k string) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	if v, ok := m[k].(map[string]any); ok {
		return v
	}
	v := map[string]any{}
	m[k] = v
	return v
}

func listAt(m map[string]any, k string) []any {
	v, _ := m[k].([]any)
	return v
}

// Annotations CAPI writes on an infrastructure machine cloned from a
// template.
const (
	ClonedFromNameAnnotation      = "cluster.x-k8s.io/cloned-from-name"
	ClonedFromGroupKindAnnotation = "cluster.x-k8s.io/cloned-from-groupkind"
)

// TemplateRef names an infrastructure machine template, as in
// KubeadmControlPlane.spec.machineTemplate.spec.infrastructureRef.
type TemplateRef struct {
	APIGroup string
	Kind     string
	Name     string
}

// ClonedFromTemplate answers KubeadmControlPlane's infrastructure question:
// was this infrastructure machine cloned from the template the control plane
// now names? A machine without the cloned-from annotations (older or adopted
// machines) matches, as in CAPI. When it does not match, reason reads like
// CAPI's: "Infrastructure template on KCP rotated from A.group x to B.group y".
func ClonedFromTemplate(infra any, ref TemplateRef) (matches bool, reason string, err error) {
	in, err := readInput(ObjectInfrastructure, "current", infra)
	if err != nil {
		return false, "", err
	}
	data, err := in.asData()
	if err != nil {
		return false, "", newErr(ObjectInfrastructure, "current", "", ErrUnsupportedValue, "%v", err)
	}
	ann, _ := dataAt(data, "metadata", "annotations").(map[string]any)
	name, okName := ann[ClonedFromNameAnnotation].(string)
	gk, okGK := ann[ClonedFromGroupKindAnnotation].(string)
	if !okName || !okGK {
		return true, "", nil
	}
	want := ref.Kind + "." + ref.APIGroup
	if name == ref.Name && gk == want {
		return true, "", nil
	}
	return false, fmt.Sprintf("Infrastructure template on KCP rotated from %s %s to %s %s", gk, name, want, ref.Name), nil
}
