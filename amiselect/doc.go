// Package amiselect decides which machine image (AMI) a node gets and whether
// a node's image is out of date, in the language Karpenter users already
// write: EC2NodeClass amiSelectorTerms, as defined by karpenter-provider-aws
// v1.15.
//
// The verbs are few:
//
//   - Validate checks terms with Karpenter's rules (id alone in its term,
//     alias alone in the list, at most 30 terms and 20 tags, alias format and
//     length, Windows only @latest, amiFamily agreeing with the alias) and
//     returns typed errors naming the term index and field.
//   - ParseAlias and Alias.Parameters turn "al2023@latest" or
//     "bottlerocket@v1.20.3" into the EKS-optimized SSM parameter paths for a
//     Kubernetes version, with Karpenter's gates (no AL2 from 1.33, Windows2025
//     only from 1.35).
//   - Resolve runs the terms against an ImageSource and chooses one image per
//     requirement set (architecture, accelerator variant, Windows build).
//     The Resolution it returns answers ImageFor (what a new node gets) and
//     IsDrifted (AMI drift, as plain values; missing data, such as no
//     image resolved for the node's requirements, is "cannot decide", never
//     drift), and is itself the JSON record
//     of the choice: store it, compare it with Changes, or pin a later stage
//     to it with WithPin.
//   - ConvertV1Beta1 turns a v1beta1 amiFamily into v1 terms and says what
//     cannot be converted.
//
// Image sources: Catalog (in memory, loadable from DescribeImages JSON, for
// tests and offline use), Cache (TTL cache around any source, with
// Karpenter's invalidation of "latest" parameters that point at deprecated
// images), SourceFuncs (adapt two functions), and the real EC2/SSM adapter in
// the separate module github.com/upgradekit/upgradekit/amiselect/aws, kept
// apart so this package does not pull in the AWS SDK.
//
// Beyond Karpenter it offers staged promotion: WithMinAge (do not choose an
// image until it has aged), stored resolutions, Changes ("what would change")
// and WithPin (run only what an earlier stage runs: dev -> staging -> prod).
//
// Deliberate differences from Karpenter, each because Karpenter's behaviour
// silently does something the user did not ask for: an ssmParameter combined
// with other fields in a term is refused (Karpenter ignores one of them); a
// second "@" in an alias is refused (Karpenter's controller exits); an empty
// tags map is refused (Karpenter would select every image it can see); so is
// a Bottlerocket version made only of "v"s (it can never resolve); an SSM
// error other than "not found" fails the resolution instead of resolving
// fewer images; ties that Karpenter leaves to the source's order are broken by
// image id; ids must match ^ami-[0-9a-z]+$ in full.
//
// What it is not: it does not launch instances, render user data, pick
// instance types or block devices, or watch the cluster. Requirements model
// only what image choice needs (architecture, GPU/accelerator variant,
// Windows build), not Karpenter's full scheduling requirements, and the
// amiFamily is checked only for agreement with an alias (user data is not
// this package's concern). It imports nothing else from upgradekit; the drift
// package consumes IsDrifted through plain values.
package amiselect
