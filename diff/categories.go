package diff

// BuiltinCategories returns the categories the built-in table
// (DefaultCategories) and the diff itself assign, in declaration order. A
// category of your own comes from your own Categorize rules.
func BuiltinCategories() []Category {
	return []Category{
		CategoryKubernetesVersion, CategoryEtcdVersion, CategoryAddons, CategoryControlPlaneConfig,
		CategoryKubeletConfig, CategoryKubeadmConfig, CategoryFiles, CategoryCommands, CategoryUsers,
		CategoryNTP, CategoryDisks, CategoryImage, CategoryInstanceType, CategoryFailureDomain,
		CategoryMetadata, CategoryReferences, CategoryOther,
	}
}
