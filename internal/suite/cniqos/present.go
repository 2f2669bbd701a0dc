package cniqos

import "github.com/cnperf/cnperf/internal/suite"

// Presentation implements suite.Presenter: a line per feature with its
// verdict and the figure or reason behind it, per datapath mode.
func (Suite) Presentation() suite.Presentation {
	return suite.Presentation{LabelOrder: []string{LabelFeature}, Tables: []suite.Table{{Title: "cni-qos: the CNI's own QoS, per feature",
		Columns: []suite.Column{
			{Head: "mode", Field: suite.FieldBackend},
			{Head: "feature", Label: LabelFeature},
			{Head: "annotations", Label: LabelSet},
			{Head: "verdict", Label: LabelVerdict},
			{Head: "figure or reason", Label: LabelWhy},
		}}}}
}
