// Package aws is the real EC2/SSM ImageSource for amiselect: it answers
// amiselect's queries with EC2 DescribeImages (all pages, owners, filters,
// deprecated images included when asked) and SSM GetParameter, through
// aws-sdk-go-v2.
//
// It is a separate Go module so that amiselect itself does not depend on
// the AWS SDK. Retries, throttling back-off, credentials, region and
// endpoints are the SDK clients' business: configure them on the clients
// (or the aws.Config) you pass in. Import it under a name that does not
// clash with the SDK's aws package, e.g. amiaws.
//
// Errors: a missing client matches ErrNoClient, an unusable answer
// ErrInvalidResponse, a missing SSM parameter amiselect.ErrParameterNotFound;
// SDK errors stay reachable with errors.As.
//
// It is not a cache: wrap it in amiselect.NewCache, as Karpenter does, so a
// controller does not call EC2 and SSM on every reconcile. It does not pick
// images either: that is amiselect.Resolve.
package aws
