// Package docs holds cnperf's documentation (the Markdown files in this
// directory) and the tests that keep it whole: ARCHITECTURE.md's package
// map names every package of the module, and no document links outside
// the repository or to a file or heading that does not exist.
package docs
