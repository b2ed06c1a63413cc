module github.com/upgradekit/upgradekit/hack/vulncheck

go 1.26.0
