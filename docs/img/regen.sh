#!/bin/sh
# docs/img/regen.sh - redraws the pictures of docs/guide.md from the
# samples: `sgc --emit=dot` through Graphviz's dot.  Run after a change to
# the samples or to what --emit=dot draws:
#
#   docs/img/regen.sh [PATH/TO/sgc]       (default: build/compiler/sgc)
set -eu
cd "$(dirname "$0")/../.."
sgc=${1:-build/compiler/sgc}
for name in side_branches record_wait del_side_stream input_mutation \
	grad_accum activation_offload microbatch_overlap; do
	"$sgc" "samples/$name.sg" --emit=dot -o - | dot -Tsvg -o "docs/img/$name.svg"
	echo "docs/img/$name.svg"
done
