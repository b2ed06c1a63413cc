package nodeexec

// Linux capability names (without the CAP_ prefix, as Kubernetes spells
// them in securityContext.capabilities).
const (
	CapSysAdmin  = "SYS_ADMIN"
	CapSysChroot = "SYS_CHROOT"
	CapSysPtrace = "SYS_PTRACE"
)

// RequiredCapabilities returns the capabilities a process running as uid 0
// needs to nsenter the given namespaces of a target that holds every
// capability (the host's PID 1). Empty namespaces means no nsenter and no
// capability.
//
// Why each one (checked against setns(2), ptrace(2) and, in this package's
// tests, against the kernel by running nsenter under setpriv with exactly
// this bounding set and with each capability removed):
//   - SYS_PTRACE: nsenter opens /proc/PID/ns/*, which needs ptrace read
//     access to the target. Without CAP_SYS_PTRACE that access requires the
//     caller's permitted set to include the target's, and PID 1 has all
//     capabilities: "cannot open /proc/1/ns/uts: Permission denied".
//   - SYS_ADMIN: setns(2) into a mount, UTS, IPC, network or PID namespace
//     needs CAP_SYS_ADMIN in the namespace's user namespace.
//   - SYS_CHROOT: setns(2) into a mount namespace also needs
//     CAP_SYS_CHROOT (it changes the root directory).
//
// Capabilities are not the whole story for a pod: the target must be
// visible (hostPID), the container must run as uid 0, and on hosts with
// AppArmor or SELinux the container's profile must allow ptrace-reading an
// unconfined process (AppArmor Unconfined, SELinux type spc_t). Package
// nodepod sets all of that; see its documentation for the full matrix.
func RequiredCapabilities(namespaces []Namespace) []string {
	if len(namespaces) == 0 {
		return nil
	}
	caps := []string{CapSysAdmin}
	for _, n := range namespaces {
		if n == NamespaceMount {
			caps = append(caps, CapSysChroot)
			break
		}
	}
	return append(caps, CapSysPtrace)
}
