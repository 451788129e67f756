// Package docs holds the tests that keep the documentation true: they read
// the fenced blocks of README.md, docs/install.md, docs/upgrade.md,
// docs/uninstall.md and imager/README.md and run or apply them.
//
//   - TestDocs* (docs_test.go): every YAML example is applied to a real API
//     server (server-side dry run, the project's CRDs installed) and every
//     shell block is run or listed, with its reason, in the one table of
//     blocks that cannot run here;
//   - TestDocsInstallReachesAReadyNode (install_test.go): docs/install.md's
//     shell blocks, as a new user with static workers runs them, against
//     the simulated world, then the controller as the chart's Deployment
//     describes it, until step 7's pods run on a Ready bare-metal node;
//   - TestWalkthrough* (walkthrough_test.go): imager/README.md's rescue
//     walkthrough, its shell blocks as written, against the simulated world
//     (scwsim, a simulated rescue host over real SSH, S3, kube-apiserver),
//     until the node it makes joins.
//
// Both need the test tools and binaries (make tools build):
//
//	go test -count=1 -run 'Docs|Walkthrough' ./test/...
package docs
