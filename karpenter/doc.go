// Package karpenter speaks to Karpenter clusters as they are: it
// reproduces Karpenter's own static drift hashes, reads NodePools,
// NodeClaims, EC2NodeClasses and Nodes from a cluster or a dump, and says
// for every NodeClaim whether Karpenter finds it drifted, and why.
//
// It lives in its own Go module (github.com/upgradekit/upgradekit/karpenter)
// so that upgradekit's core module stays free of Karpenter's dependencies;
// it imports Karpenter v1.14.1 (sigs.k8s.io/karpenter) and the AWS
// provider v1.14.1, the newest releases that build with Go 1.26.8 (v1.15
// needs Go 1.26.9).
//
// It has three parts:
//
//   - Hashes: NodePoolHash and EC2NodeClassHash equal Karpenter's
//     (*NodePool).Hash() and (*EC2NodeClass).Hash(caBundle) exactly
//     (hashstructure/v2, FNV-1 64, SlicesAsSets, IgnoreZeroValue, ZeroNil,
//     with Karpenter's false drift on nil vs empty maps kept), without
//     reflection: TemplateHash does not allocate. ChangedTemplateFields
//     names the template fields whose change alters the hash.
//     NodePoolHashVersion and EC2NodeClassHashVersion are Karpenter's.
//   - Reading: Read lists the objects through a controller-runtime client
//     (Scheme knows the types); ReadDump reads `kubectl get -o yaml`
//     output, converting v1beta1 NodePools, NodeClaims and EC2NodeClasses
//     to v1 (ConvertV1beta1) the way Karpenter's v1 conversion did;
//     ReadInstances reads `aws ec2 describe-instances` output.
//   - Explaining: Karpenter's drift rules as drift.Checks, composed by
//     Explain in Karpenter's order: NodePoolHashCheck (static drift, with
//     the changed fields when the previous template is known, else the
//     hashed fields written since, from managedFields),
//     RequirementsCheck, InstanceTypeCheck (with the instance type
//     offerings, ReadOfferings), NodeClassHashCheck, AMICheck (which image replaced
//     which, and with CatalogResolver the selector term and why the new one
//     won), SecurityGroupCheck, SubnetCheck and CapacityReservationCheck
//     (from the instances) and PlacementGroupCheck. Hash
//     version rules are Karpenter's: a NodeClaim stamped with another
//     version is re-stamped, not drifted, unless it is already drifted.
//
// What it is not: it does not patch NodeClaims, delete nodes or replace
// Karpenter's controllers; it reads and explains. It does not check
// capacity types in InstanceTypeNotFound (offerings list zones only), nor
// placement groups selected by name (only EC2 resolves them). AMI drift judges a NodeClaim by
// its labels, which Karpenter writes from the instance type's
// requirements; Karpenter itself uses the instance type. The EC2NodeClass
// hash depends on the cluster's CA bundle, which a dump does not hold:
// give it (WithClusterCABundle) and NodeClassHashCheck computes the hash
// Karpenter will write; without it, it trusts an annotation at the current
// hash version and cannot tell where none is written yet.
package karpenter
