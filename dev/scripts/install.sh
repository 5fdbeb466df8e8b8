#!/bin/sh
# Installs, upgrades and uninstalls ModelBackfill on a cluster: the one script docs/install.md calls, so the documented
# path is the tested one. Run from a clone after `npm ci` (the secrets generator runs with tsx).
#
#   dev/scripts/install.sh install            secrets (once), the CRD, the NATS auth Secret, the workloads; then waits
#   dev/scripts/install.sh nats-auth          only the secrets (once) and the NATS auth Secret: before an upgrade that
#                                         brings new identities, so nats-server knows them before any pod uses them
#   dev/scripts/install.sh wait               only install's waits (a release already applied); a failed wait names
#                                         each pod that is not Ready and why its containers wait
#   dev/scripts/install.sh uninstall          the workloads only: the CRD and every ModelBackfill stay
#   dev/scripts/install.sh remove-finalizers  strips ModelBackfill's finalizer from every object (controller gone)
#   dev/scripts/install.sh delete-crd         removes the finalizers, then the CRD: deletes EVERY ModelBackfill
#   dev/scripts/install.sh render             secrets (once) and what install would apply, into MBF_DIR/rendered.yaml;
#                                         touches no cluster object
#
# Customisation lives in MBF_DIR and is never rewritten: every *.yaml in MBF_DIR/values.d/ is a Helm values file
# (helm-* modes, in name order, over the script's own settings), every *.yaml in MBF_DIR/patches/ a kustomize patch
# (kustomize modes: a strategic-merge patch naming its object, or a JSON 6902 one with a `# target: Kind/name` line).
# MBF_VALUES / MBF_PATCH copy files there (comma-separated); a different file of the same name there is refused.
#
# Settings (environment; defaults in brackets):
#   MBF_MODE          keda | knative | helm-keda | helm-knative                    [keda]
#   MBF_IMAGE         the image, repository:tag                    [ghcr.io/flexinfer/model-backfill:0.2.0]
#   MBF_NAMESPACE     where the functions run                                      [model-backfill]
#   MBF_NATS_HOST     host:port of nats-server                     [nats.nats.svc.cluster.local:4222]
#   MBF_NATS_MONITOR  host:port of its monitoring endpoint (KEDA reads /jsz)  [<MBF_NATS_HOST's first host>:8222]
#   MBF_NATS_REPLICAS JetStream replicas: 1 for one server, 3 for a 3-server cluster [1]
#   MBF_NATS_NAMESPACE where the generated nats-server auth Secret goes; empty: not applied [nats]
#   MBF_DIR           keeps the generated secrets and what was applied: keep it, back it up  [./model-backfill-install]
#   MBF_RELEASE       the Helm release (helm-* modes)                              [model-backfill]
#   MBF_CRD           install the ModelBackfill CRD: true | false (managed elsewhere)  [true]
#   MBF_GATE_NAMESPACES the namespaces whose backfills may opt into the background gate, comma-separated: each gets
#                     a NATS user and its Secret model-backfill-gate, and admit injects the gate (docs/gate.md) [none]
#   MBF_GATE_NATS_URL NATS as the gate sidecars reach it from those namespaces      [nats://gate@<MBF_NATS_HOST>]
#   MBF_GATEWAY_NKEY  the gateways' public key (U…) nats-server knows today, kept when MBF_DIR is new but the
#                     cluster already runs an installation (one made before this script, e.g. by the 0.1.0 chart);
#                     `new`: the gateways get a new identity instead (their Secret must reach them first)    [none]
#   MBF_VALUES        Helm values files to add to MBF_DIR/values.d/ (helm-* modes)  [none]
#   MBF_PATCH         kustomize patch files to add to MBF_DIR/patches/ (keda, knative) [none]
#   MBF_WAIT          wait for the provision Job and every always-on function: true | false [true]
#   MBF_TIMEOUT       how long each wait may take                                  [300s]
#   KUBECTL, HELM     the commands                                                 [kubectl, helm]
set -eu

here=$(cd "$(dirname "$0")/../.." && pwd)
mode=${MBF_MODE:-keda}
image=${MBF_IMAGE:-ghcr.io/flexinfer/model-backfill:0.2.0}
ns=${MBF_NAMESPACE:-model-backfill}
nats_host=${MBF_NATS_HOST:-nats.nats.svc.cluster.local:4222}
# With a server list (a:4222,b:4222) KEDA reads one server's /jsz: the first's.
nats_first=${nats_host%%,*}
nats_monitor=${MBF_NATS_MONITOR:-${nats_first%:*}:8222}
nats_replicas=${MBF_NATS_REPLICAS:-1}
nats_ns=${MBF_NATS_NAMESPACE-nats}
dir=${MBF_DIR:-./model-backfill-install}
release=${MBF_RELEASE:-model-backfill}
crd=${MBF_CRD:-true}
gate_namespaces=$(printf '%s' "${MBF_GATE_NAMESPACES:-}" | tr -d ' ')
gate_nats_url=${MBF_GATE_NATS_URL:-nats://gate@$nats_host}
gateway_nkey=${MBF_GATEWAY_NKEY:-}
add_values=${MBF_VALUES:-}
add_patches=${MBF_PATCH:-}
wait=${MBF_WAIT:-true}
timeout=${MBF_TIMEOUT:-300s}
kubectl=${KUBECTL:-kubectl}
helm=${HELM:-helm}
CRD=modelbackfills.ai.flexinfer
FINALIZER=ai.flexinfer/modelbackfill

say() { printf 'install: %s\n' "$*" >&2; }
die() {
	printf 'install: %s\n' "$*" >&2
	exit 1
}

case "$mode" in
keda | knative) overlay=$mode format=kustomize ;;
helm-keda | helm-knative) overlay=${mode#helm-} format=helm ;;
*) die "MBF_MODE must be keda, knative, helm-keda or helm-knative, not '$mode'" ;;
esac
case "$image" in
*:*) repository=${image%:*} tag=${image##*:} ;;
*) die "MBF_IMAGE must be repository:tag, not '$image'" ;;
esac
case "$nats_replicas" in
1 | 3 | 5) ;;
*) die "MBF_NATS_REPLICAS must be 1, 3 or 5, not '$nats_replicas'" ;;
esac
case "$crd$wait" in
truetrue | truefalse | falsetrue | falsefalse) ;;
*) die "MBF_CRD and MBF_WAIT must be true or false" ;;
esac
if [ "$format" = helm ] && [ -n "$add_patches" ]; then die "MBF_PATCH is for the kustomize modes; MBF_MODE=$mode takes MBF_VALUES"; fi
if [ "$format" = kustomize ] && [ -n "$add_values" ]; then die "MBF_VALUES is for the helm-* modes; MBF_MODE=$mode takes MBF_PATCH"; fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
secrets=$dir/secrets

# Copies the user's files (comma-separated) into a folder of MBF_DIR that only the user edits: once there they apply
# on every later run, and nothing of this script ever rewrites them.
adopt_files() { # <folder> <files> <setting>
	mkdir -p "$1"
	for f in $(printf '%s' "$2" | tr ',' ' '); do
		[ -f "$f" ] || die "$3 names $f, which is not a file"
		case "$f" in *.yaml | *.yml) ;; *) die "$3: $f must be a .yaml file" ;; esac
		name=$(basename "$f")
		case "$name" in *.yml) name=${name%.yml}.yaml ;; esac
		if [ -e "$1/$name" ]; then
			cmp -s "$f" "$1/$name" || die "$1/$name exists and differs from $f: edit it there, or give the file another name"
		else
			cp "$f" "$1/$name"
			say "added $f as $1/$name (applied on every run from now on)"
		fi
	done
}

has_crd() { "$kubectl" get crd "$1" -o name >/dev/null 2>&1; }

# What the functions read or act through must already be served: FlexInfer's kinds, and KEDA's or Knative's.
check_prerequisites() {
	"$kubectl" version >/dev/null 2>&1 || die "cannot reach the cluster with $kubectl (KUBECONFIG?)"
	missing=
	for c in models.ai.flexinfer gamingsessions.ai.flexinfer gpuleases.ai.flexinfer; do
		has_crd "$c" || missing="$missing $c"
	done
	for gate_ns in $(printf '%s' "$gate_namespaces" | tr ',' ' '); do
		"$kubectl" get namespace "$gate_ns" >/dev/null 2>&1 ||
			die "MBF_GATE_NAMESPACES names $gate_ns, which does not exist: create it (or remove it from the list) first"
	done
	[ -z "$missing" ] || die "FlexInfer's CRDs are missing:$missing. ModelBackfill reads FlexInfer's Models, GamingSessions and GPULeases: install FlexInfer first (docs/install.md)."
	if [ "$overlay" = keda ]; then
		has_crd scaledobjects.keda.sh || die "KEDA is not installed (no scaledobjects.keda.sh CRD); install KEDA ≥ 2.21 first"
	else
		for c in services.serving.knative.dev brokers.eventing.knative.dev apiserversources.sources.knative.dev; do
			has_crd "$c" || die "Knative is not installed (no $c CRD); install Knative Serving and Eventing first"
		done
	fi
}

# Once per installation: an existing directory is kept (generating again would rotate every identity).
make_secrets() {
	if [ -e "$secrets/public-keys.env" ]; then
		if [ "$format" = helm ] && [ ! -e "$secrets/values.yaml" ]; then
			die "$secrets holds kustomize Secrets, but MBF_MODE=$mode needs Helm values: use another MBF_DIR"
		fi
		if [ "$format" = kustomize ] && [ ! -e "$secrets/model-backfill/secrets.yaml" ]; then
			die "$secrets holds Helm values, but MBF_MODE=$mode needs kustomize Secrets: use another MBF_DIR"
		fi
		say "using the secrets in $secrets"
		# The gates' users follow MBF_GATE_NAMESPACES; every other identity stays as it is.
		if [ -n "$gate_namespaces" ] || [ -d "$secrets/gates" ]; then
			(cd "$here" && npx --no-install tsx dev/tools/secrets/generate.ts --out "$secrets" --update-gates \
				--gate-namespaces "$gate_namespaces") >&2
		fi
		return
	fi
	mkdir -p "$dir/.keep"
	chmod 700 "$dir/.keep"
	keep=$dir/.keep/existing.env
	(umask 077 && existing_identities >"$keep") || {
		rm -rf "$dir/.keep"
		exit 1
	}
	if [ -s "$keep" ]; then
		say "keeping the NATS identities and the ingress token of the installation already in $ns"
	else
		say "generating every NATS identity and the ingress token into $secrets"
	fi
	(cd "$here" && npx --no-install tsx dev/tools/secrets/generate.ts --out "$secrets" --format "$format" \
		--namespace "$ns" --nats-namespace "${nats_ns:-nats}" --nats-url "nats://$nats_host" \
		--gate-namespaces "$gate_namespaces" --keep "$keep") >&2 || {
		rm -rf "$dir/.keep"
		exit 1
	}
	rm -rf "$dir/.keep"
}

# The Secrets' prefix: the overlays' names, or the chart's fullname (the release, plus -model-backfill unless it
# contains it).
secret_prefix() {
	if [ "$format" = kustomize ]; then
		echo model-backfill
	else
		case "$release" in *model-backfill*) echo "$release" ;; *) echo "$release-model-backfill" ;; esac | cut -c1-40 | sed 's/-*$//'
	fi
}

# An installation this MBF_DIR did not make (one from before this script: the 0.1.0 chart or overlays) already has
# its identities in the cluster, and nats-server knows their public keys. New ones would lock every running pod and
# every gateway out as soon as nats-server reloads, foreground demand unobservable until all of them have rolled:
# they are kept (rotation is its own step: docs/upgrade.md). Prints the --keep lines (dev/tools/secrets/generate.ts).
existing_identities() {
	prefix=$(secret_prefix)
	found=false
	users=$(grep -v '^[[:space:]]*#' "$here/deploy/nats/auth.conf" | sed -n 's/.*\$FLEXINFER_\([A-Z0-9_]*\)_NKEY.*/\1/p' | sort -u)
	for u in $users; do
		lower=$(printf '%s' "$u" | tr 'A-Z' 'a-z')
		seed=$("$kubectl" -n "$ns" get secret "$prefix-nats-$lower" -o jsonpath='{.data.seed}' 2>/dev/null | base64 -d 2>/dev/null || true)
		[ -n "$seed" ] || continue
		printf 'FLEXINFER_%s_SEED=%s\n' "$u" "$seed"
		found=true
	done
	token=$("$kubectl" -n "$ns" get secret "$prefix-ingress-token" -o jsonpath='{.data.token}' 2>/dev/null | base64 -d 2>/dev/null || true)
	if [ -n "$token" ]; then
		printf 'INGRESS_TOKEN=%s\n' "$token"
		found=true
	fi
	[ "$found" = true ] || return 0
	say "found the NATS identities of an installation in $ns (Secrets $prefix-nats-<user>): keeping them"
	case "$gateway_nkey" in
	new) say "MBF_GATEWAY_NKEY=new: the gateways get a new identity; give them $secrets/gateway/secret.yaml before nats-server reloads" ;;
	U*) printf 'FLEXINFER_GATEWAY_NKEY=%s\n' "$gateway_nkey" ;;
	*) die "an installation already runs in $ns: set MBF_GATEWAY_NKEY to the gateways' public key nats-server knows (its FLEXINFER_GATEWAY_NKEY), or to new to give them a new identity (docs/upgrade.md)" ;;
	esac
}

# Each opted-in namespace gets its gate's seed (check_prerequisites made sure they exist: they are the users').
apply_gate_secrets() {
	for gate_ns in $(printf '%s' "$gate_namespaces" | tr ',' ' '); do
		"$kubectl" apply -f "$secrets/gates/$gate_ns/secret.yaml" >&2
	done
}

apply_nats_auth() {
	if [ -z "$nats_ns" ]; then
		say "MBF_NATS_NAMESPACE is empty: give nats-server $secrets/nats/secret.yaml yourself (deploy/nats/README.md)"
		return
	fi
	"$kubectl" get namespace "$nats_ns" >/dev/null 2>&1 || "$kubectl" create namespace "$nats_ns" >/dev/null
	"$kubectl" apply -k "$secrets/nats" >&2
	say "nats-server must mount Secret model-backfill-nats-auth in $nats_ns and include its auth.conf (deploy/nats/README.md)"
}

# The kustomize modes: an overlay of this installation's own, composed from the shipped one, the Secrets and the
# user's patches (MBF_DIR/patches/, copied in: kustomize reads patch files below the overlay only).
write_overlay() {
	adopt_files "$dir/patches" "$add_patches" MBF_PATCH
	rm -rf "$dir/overlay"
	mkdir -p "$dir/overlay/patches"
	# kustomize takes a relative path to a base only.
	base=$(node -e 'process.stdout.write(require("path").relative(process.argv[1], process.argv[2]))' "$dir/overlay" "$here/$overlay")
	# The shipped overlay has already renamed the image: it is matched under that name here.
	shipped=$(sed -n 's/^ *newName: *//p' "$here/$overlay/kustomization.yaml" | head -n 1)
	[ -n "$shipped" ] || die "$overlay/kustomization.yaml names no image (images: newName)"
	cat >"$dir/overlay/kustomization.yaml" <<EOF
# Written by dev/scripts/install.sh: this installation's overlay of $overlay/, with its own Secrets.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: $ns
resources:
  - $base
  - ../secrets/model-backfill
images:
  - name: $shipped
    newName: $repository
    newTag: "$tag"
patches:
  - target: {kind: ConfigMap, name: model-backfill-config}
    patch: |-
      - {op: replace, path: /data/NATS_HOST, value: "$nats_host"}
      - {op: replace, path: /data/NATS_REPLICAS, value: "$nats_replicas"}
EOF
	if [ -n "$gate_namespaces" ]; then
		cat >>"$dir/overlay/kustomization.yaml" <<EOF
      - {op: add, path: /data/GATE_IMAGE, value: "$image"}
      - {op: add, path: /data/GATE_NATS_URL, value: "$gate_nats_url"}
EOF
	fi
	for p in "$dir"/patches/*.yaml; do
		[ -e "$p" ] || continue
		name=$(basename "$p")
		cp "$p" "$dir/overlay/patches/$name"
		target=$(sed -n 's|^# *target: *\([A-Za-z]*\)/\([a-z0-9.-]*\) *$|\1 \2|p' "$p" | head -n 1)
		if [ -n "$target" ]; then
			printf '  - path: patches/%s\n    target: {kind: %s, name: %s}\n' "$name" "${target% *}" "${target#* }" \
				>>"$dir/overlay/kustomization.yaml"
		else
			printf '  - path: patches/%s\n' "$name" >>"$dir/overlay/kustomization.yaml"
		fi
	done
	"$kubectl" kustomize "$dir/overlay" >"$dir/rendered.yaml.raw" ||
		die "kustomize refused $dir/overlay (a patch in $dir/patches/?)"
	sed "s|natsServerMonitoringEndpoint: nats.nats.svc.cluster.local:8222|natsServerMonitoringEndpoint: $nats_monitor|" \
		"$dir/rendered.yaml.raw" >"$dir/rendered.yaml.new"
	rm -f "$dir/rendered.yaml.raw"
	mv "$dir/rendered.yaml.new" "$dir/rendered.yaml"
}

install_kustomize() {
	if [ "$crd" = true ]; then
		say "applying the ModelBackfill CRD (deploy/base/crds/)"
		"$kubectl" apply --server-side --force-conflicts --field-manager=model-backfill -k "$here/deploy/base/crds" >&2
		"$kubectl" wait --for=condition=Established --timeout="$timeout" "crd/$CRD" >&2
	fi
	write_overlay
	# A Job's pod template cannot change: the previous provision Job goes, the new one provisions the new release.
	"$kubectl" -n "$ns" delete job model-backfill-provision --ignore-not-found >&2
	"$kubectl" apply -f "$dir/rendered.yaml" >&2
	job=model-backfill-provision
}

# The chart's values from this script's settings, rewritten on every run; the user's own are in values.d/.
write_values() {
	adopt_files "$dir/values.d" "$add_values" MBF_VALUES
	cat >"$dir/install-values.yaml" <<EOF
# Written by dev/scripts/install.sh from its MBF_* settings on every run: put yours in values.d/ (they win).
mode: $overlay
crd: {install: $crd}
image: {repository: "$repository", tag: "$tag"}
nats: {host: "$nats_host", monitoringEndpoint: "$nats_monitor", replicas: $nats_replicas}
EOF
	if [ -n "$gate_namespaces" ]; then
		printf 'gate: {enabled: true, natsUrl: "%s"}\n' "$gate_nats_url" >>"$dir/install-values.yaml"
	fi
}

# The -f arguments of helm, one per line: the secrets, the script's settings, then values.d/ in name order.
values_files() {
	printf -- '-f\n%s\n-f\n%s\n' "$secrets/values.yaml" "$dir/install-values.yaml"
	for v in "$dir"/values.d/*.yaml; do
		[ -e "$v" ] && printf -- '-f\n%s\n' "$v"
	done
	return 0
}

render_helm() {
	write_values
	files=$(values_files)
	# The cluster's version when it answers, else kubectl's own (the chart states the minimum it accepts).
	kube_version=$("$kubectl" version -o json 2>/dev/null | sed -n 's/.*"gitVersion": *"\(v[0-9.]*\).*/\1/p' | tail -n 1)
	# shellcheck disable=SC2086 # one argument per line (IFS), none with a newline
	(IFS='
' && "$helm" template "$release" "$here/deploy/charts/model-backfill" -n "$ns" ${kube_version:+--kube-version} \
		${kube_version:+$kube_version} $files) >"$dir/rendered.yaml.new" || {
		rm -f "$dir/rendered.yaml.new"
		die "helm template refused the values (a file in $dir/values.d/?)"
	}
	mv "$dir/rendered.yaml.new" "$dir/rendered.yaml"
}

install_helm() {
	write_values
	set --
	# A CRD that Helm did not create (deploy/base/crds/, FlexInfer's, or a 0.1.0 chart's crds/) is adopted into this
	# release, unless another release owns it: then it stays that release's and this one installs none.
	if [ "$crd" = true ] && has_crd "$CRD"; then
		owner=$("$kubectl" get crd "$CRD" -o jsonpath='{.metadata.annotations.meta\.helm\.sh/release-name}')
		owner_ns=$("$kubectl" get crd "$CRD" -o jsonpath='{.metadata.annotations.meta\.helm\.sh/release-namespace}')
		if [ -z "$owner" ]; then
			say "adopting the existing $CRD into release $release (it keeps helm.sh/resource-policy: keep)"
			"$kubectl" label crd "$CRD" app.kubernetes.io/managed-by=Helm --overwrite >&2
			"$kubectl" annotate crd "$CRD" "meta.helm.sh/release-name=$release" \
				"meta.helm.sh/release-namespace=$ns" --overwrite >&2
		elif [ "$owner" != "$release" ] || [ "$owner_ns" != "$ns" ]; then
			say "$CRD belongs to release $owner_ns/$owner: leaving it there"
			set -- --set crd.install=false
		fi
	fi
	files=$(values_files)
	# shellcheck disable=SC2086 # one argument per line (IFS), none with a newline
	(IFS='
' && "$helm" upgrade --install "$release" "$here/deploy/charts/model-backfill" -n "$ns" --create-namespace \
		$files "$@" >&2)
	job=$("$kubectl" -n "$ns" get job -l "app.kubernetes.io/instance=$release,app.kubernetes.io/component=provision" \
		--sort-by=.metadata.creationTimestamp -o jsonpath='{.items[-1:].metadata.name}')
}

# A failed wait shows kubectl's bare timeout only: name each pod that is not Ready and why its containers wait
# (ImagePullBackOff and its message is the usual first-install case), then stop.
explain_not_ready() {
	say "$1 did not become ready within $timeout; pods in $ns that are not Ready:"
	"$kubectl" -n "$ns" get pods -o jsonpath='{range .items[*]}{.metadata.name}{"\t"}{.status.conditions[?(@.type=="Ready")].status}{"\t"}{range .status.initContainerStatuses[*]}{.name}{"="}{.state.waiting.reason}{": "}{.state.waiting.message}{"\t"}{end}{range .status.containerStatuses[*]}{.name}{"="}{.state.waiting.reason}{": "}{.state.waiting.message}{"\t"}{end}{"\n"}{end}' 2>&1 |
		awk -F '\t' '$2 != "True" && $1 != "" {
			print "install:   pod " $1
			for (i = 3; i <= NF; i++) {
				c = index($i, "="); if (c == 0) continue
				why = substr($i, c + 1); if (why == ": ") continue
				print "install:     container " substr($i, 1, c - 1) ": " why
			}
		}' >&2
	say "hint: ImagePullBackOff/ErrImagePull means the image $image cannot be pulled: set MBF_IMAGE to an image the nodes can pull, or load the release's image archive into the cluster (docs/troubleshooting.md#install-waits-time-out)"
	exit 1
}

wait_ready() {
	[ "$wait" = true ] || return 0
	say "waiting for the provision Job $job (the NATS topology)"
	"$kubectl" -n "$ns" wait --for=condition=complete --timeout="$timeout" "job/$job" >&2 || explain_not_ready "job/$job"
	if [ "$overlay" = keda ]; then
		# Scaled to zero by KEDA when idle: admit and lifecycle are not waited for.
		for d in $("$kubectl" -n "$ns" get deploy -o name); do
			case "$d" in */*-admit | */*-lifecycle) continue ;; esac
			"$kubectl" -n "$ns" rollout status --timeout="$timeout" "$d" >&2 || explain_not_ready "$d"
		done
	else
		"$kubectl" -n "$ns" wait --for=condition=Ready --timeout="$timeout" ksvc --all >&2 || explain_not_ready 'the Knative services'
		"$kubectl" -n "$ns" rollout status --timeout="$timeout" deploy >&2 || explain_not_ready 'the Deployments'
	fi
	say "installed: kubectl -n $ns get pods; kubectl mbf get -A (operator identity: . $secrets/operator/env.sh)"
}

uninstall() {
	if [ "$format" = helm ]; then
		"$helm" uninstall "$release" -n "$ns" >&2
	elif [ -e "$dir/rendered.yaml" ]; then
		"$kubectl" delete --ignore-not-found -f "$dir/rendered.yaml" >&2
	else
		die "$dir/rendered.yaml not found: nothing this script installed there"
	fi
	has_crd "$CRD" || return 0
	say "kept the $CRD CRD and every ModelBackfill (dev/scripts/install.sh delete-crd removes them)"
	# Nothing cancels a running backfill Job any more: name them, foreground must not compete with them.
	active=$("$kubectl" get jobs -A -l ai.flexinfer/model-backfill --field-selector status.successful=0 -o name 2>/dev/null | wc -l)
	if [ "$active" -gt 0 ]; then
		say "$active backfill Job(s) not finished: nothing preempts them now. Delete them with"
		say "  $kubectl delete jobs -A -l ai.flexinfer/model-backfill --field-selector status.successful=0"
	fi
	return 0
}

remove_finalizers() {
	has_crd "$CRD" || return 0
	"$kubectl" get "$CRD" -A -o jsonpath='{range .items[*]}{.metadata.namespace}{" "}{.metadata.name}{" "}{.metadata.finalizers}{"\n"}{end}' |
		while read -r n name finalizers; do
			case "$finalizers" in *"\"$FINALIZER\""*) ;; *) continue ;; esac
			# Every other finalizer stays; a merge patch replaces the list with the rest.
			rest=$(printf '%s' "$finalizers" | sed -e "s|\"$FINALIZER\"||" -e 's/,,/,/' -e 's/\[,/[/' -e 's/,\]/]/')
			"$kubectl" -n "$n" patch "$CRD" "$name" --type=merge -p "{\"metadata\":{\"finalizers\":$rest}}" >&2
		done
}

case "${1:-}" in
install)
	check_prerequisites
	make_secrets
	apply_nats_auth
	apply_gate_secrets
	if [ "$format" = helm ]; then install_helm; else install_kustomize; fi
	wait_ready
	;;
render)
	make_secrets
	if [ "$format" = helm ]; then render_helm; else write_overlay; fi
	say "rendered into $dir/rendered.yaml"
	;;
nats-auth)
	make_secrets
	apply_nats_auth
	;;
wait)
	# Only install's waits, for a release already applied: the provision Job is the newest one.
	job=$("$kubectl" -n "$ns" get job -l app.kubernetes.io/component=provision \
		--sort-by=.metadata.creationTimestamp -o jsonpath='{.items[-1:].metadata.name}')
	wait=true
	wait_ready
	;;
uninstall) uninstall ;;
remove-finalizers) remove_finalizers ;;
delete-crd)
	remove_finalizers
	"$kubectl" delete crd "$CRD" --ignore-not-found >&2
	;;
*) die "usage: dev/scripts/install.sh install | render | nats-auth | wait | uninstall | remove-finalizers | delete-crd (settings: see the script's header)" ;;
esac
