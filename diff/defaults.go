package diff

// DefaultListKeys are the built-in list keys: lists of the CAPI v1beta2
// Machine and KubeadmConfig types whose elements have a natural identity.
// CRDs declare most of these as list-map keys; files and users have none in
// the schema but are identified by path and name everywhere else.
func DefaultListKeys() Option {
	return Options{
		ListKey("machine.spec.readinessGates", "conditionType"),
		ListKey("machine.spec.taints", "key", "effect"),
		ListKey("bootstrap.spec.files", "path"),
		ListKey("bootstrap.spec.users", "name"),
		ListKey("bootstrap.spec.diskSetup.partitions", "device"),
		ListKey("bootstrap.spec.diskSetup.filesystems", "device", "partition"),
		ListKey("bootstrap.spec.clusterConfiguration.*.extraArgs", "name"),
		ListKey("bootstrap.spec.clusterConfiguration.*.extraVolumes", "name"),
		ListKey("bootstrap.spec.clusterConfiguration.*.extraEnvs", "name"),
		ListKey("bootstrap.spec.clusterConfiguration.etcd.local.extraArgs", "name"),
		ListKey("bootstrap.spec.clusterConfiguration.etcd.local.extraEnvs", "name"),
		ListKey("bootstrap.spec.*.nodeRegistration.kubeletExtraArgs", "name"),
		ListKey("bootstrap.spec.*.nodeRegistration.taints", "key", "effect"),
		ListKey("*.status.conditions", "type"),
	}
}

// DefaultSensitive are the built-in sensitive paths: inline file contents,
// passwords, SSH keys and bootstrap tokens.
func DefaultSensitive() Option {
	return Sensitive(
		"bootstrap.spec.files[*].content",
		"bootstrap.spec.users[*].passwd",
		"bootstrap.spec.users[*].sshAuthorizedKeys",
		"bootstrap.spec.initConfiguration.bootstrapTokens",
		"bootstrap.spec.joinConfiguration.discovery.bootstrapToken.token",
		"bootstrap.spec.joinConfiguration.discovery.tlsBootstrapToken",
		"bootstrap.spec.joinConfiguration.discovery.file.kubeConfig.user",
		"bootstrap.spec.ignition.containerLinuxConfig.additionalConfig",
		"*.**.password",
		"*.**.passwd",
		"*.**.userData",
	)
}

// DefaultCategories is the built-in category table. More specific rules
// come first; the first match wins. Register more with Categorize, for
// example Categorize(CategoryImage, "infrastructure(MyMachine).spec.osImage").
func DefaultCategories() Option {
	return Options{
		Categorize(CategoryMetadata, "*.metadata"),
		Categorize(CategoryKubernetesVersion, "machine.spec.version"),
		Categorize(CategoryFailureDomain, "machine.spec.failureDomain", "infrastructure.spec.failureDomain"),
		Categorize(CategoryReferences, "machine.spec.bootstrap", "machine.spec.infrastructureRef"),

		Categorize(CategoryEtcdVersion,
			"bootstrap.spec.clusterConfiguration.etcd.local.imageTag",
			"bootstrap.spec.clusterConfiguration.etcd.local.imageRepository"),
		Categorize(CategoryAddons, "bootstrap.spec.clusterConfiguration.dns", "bootstrap.spec.clusterConfiguration.proxy"),
		Categorize(CategoryControlPlaneConfig, "bootstrap.spec.clusterConfiguration"),
		Categorize(CategoryKubeletConfig,
			"bootstrap.spec.initConfiguration.nodeRegistration",
			"bootstrap.spec.joinConfiguration.nodeRegistration",
			"bootstrap.spec.kubeletConfiguration"),
		Categorize(CategoryKubeadmConfig, "bootstrap.spec.initConfiguration", "bootstrap.spec.joinConfiguration"),
		Categorize(CategoryFiles, "bootstrap.spec.files"),
		Categorize(CategoryCommands, "bootstrap.spec.preKubeadmCommands", "bootstrap.spec.postKubeadmCommands", "bootstrap.spec.bootCommands"),
		Categorize(CategoryUsers, "bootstrap.spec.users"),
		Categorize(CategoryNTP, "bootstrap.spec.ntp"),
		Categorize(CategoryDisks, "bootstrap.spec.diskSetup", "bootstrap.spec.mounts"),

		// Infrastructure providers, by kind.
		Categorize(CategoryImage,
			"infrastructure(AWSMachine).spec.ami",
			"infrastructure(AWSMachine).spec.imageLookupFormat",
			"infrastructure(AWSMachine).spec.imageLookupOrg",
			"infrastructure(AWSMachine).spec.imageLookupBaseOS",
			"infrastructure(DockerMachine).spec.customImage",
			"infrastructure(AzureMachine).spec.image",
			"infrastructure(GCPMachine).spec.image",
			"infrastructure(GCPMachine).spec.imageFamily",
			"infrastructure(VSphereMachine).spec.template",
			"infrastructure(OpenStackMachine).spec.image",
			"infrastructure(Metal3Machine).spec.image",
		),
		Categorize(CategoryInstanceType,
			"infrastructure(AWSMachine).spec.instanceType",
			"infrastructure(AWSMachine).spec.rootVolume",
			"infrastructure(AzureMachine).spec.vmSize",
			"infrastructure(AzureMachine).spec.osDisk",
			"infrastructure(GCPMachine).spec.instanceType",
			"infrastructure(GCPMachine).spec.rootDeviceSize",
			"infrastructure(VSphereMachine).spec.numCPUs",
			"infrastructure(VSphereMachine).spec.numCoresPerSocket",
			"infrastructure(VSphereMachine).spec.memoryMiB",
			"infrastructure(VSphereMachine).spec.diskGiB",
			"infrastructure(OpenStackMachine).spec.flavor",
		),
		// Any other provider: common field names.
		Categorize(CategoryImage,
			"infrastructure.spec.image", "infrastructure.spec.imageName", "infrastructure.spec.imageID",
			"infrastructure.spec.ami", "infrastructure.spec.osImage", "infrastructure.spec.template"),
		Categorize(CategoryInstanceType,
			"infrastructure.spec.instanceType", "infrastructure.spec.flavor", "infrastructure.spec.vmSize",
			"infrastructure.spec.machineType", "infrastructure.spec.size"),
	}
}

func defaultOptions() Option {
	return Options{DefaultListKeys(), DefaultSensitive(), DefaultCategories()}
}
