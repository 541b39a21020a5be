#!/usr/bin/env bash
# Regenerates the JSON Schema of a Grafana dashboard from @grafana/schema's TypeScript types, so
# that tests validate dashboards offline (no node, no Grafana at test time). Needs node + npm.
#   scripts/grafana_schema/make_schema.sh
# `-e none` is required: the default fails on "Type DataSourceRef has multiple definitions".
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/../../tests/observability/grafana-dashboard.schema.json"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here/package.json" "$here/entry.ts" "$here/tsconfig.schemagen.json" "$work/"
cd "$work"
npm install --no-audit --no-fund --silent
npx ts-json-schema-generator --path entry.ts --tsconfig tsconfig.schemagen.json \
  --type GrafanaDashboard --no-type-check -e none -o "$out"
echo "wrote $out"
