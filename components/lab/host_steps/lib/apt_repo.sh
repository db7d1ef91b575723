#!/usr/bin/env bash
# Included by the steps that add an apt repository (containerd, nvidia_toolkit, kube_repo): apt_repo
# and the key checks it makes (hardening.verifyAptKeys). Filled in: nothing.

# key_fingerprints FILE: the fingerprints of the primary keys in FILE (armored or binary), one a
# line; nothing if FILE holds no key. gpg runs in a throwaway home: nothing is imported anywhere.
key_fingerprints() {
  local home out
  home=$(mktemp -d)
  out=$(GNUPGHOME=$home gpg --batch --show-keys --with-colons "$1" 2>/dev/null || true)
  rm -rf "$home"
  # A primary key's "fpr" record follows its "pub" record; a subkey's follows "sub".
  awk -F: '$1 == "pub" { want = 1; next } $1 == "sub" { want = 0 } $1 == "fpr" && want { print $10; want = 0 }' <<<"$out"
}

# key_pinned FILE PINNED: whether FILE holds at least one key and each of its primary keys has one
# of the PINNED fingerprints (space separated). A key file with one more key is refused: apt would
# trust every key in the keyring for the repository.
key_pinned() {
  local fpr found=
  while read -r fpr; do
    case " $2 " in
      *" $fpr "*) found=1 ;;
      *) return 1 ;;
    esac
  done < <(key_fingerprints "$1")
  [ -n "$found" ]
}

# apt_repo NAME KEY_URL PINNED LINE: a signed apt source, its key fetched over HTTPS. With PINNED
# (fingerprints, components/versions.py), the key is used only if key_pinned accepts it, and a
# keyring already in place is checked the same way on every run (one that fails is fetched again);
# on a mismatch the repository's keyring and source are removed and the step fails, before apt
# reads them. PINNED '' (hardening.verifyAptKeys false): the key is fetched once, unchecked.
apt_repo() {
  local name=$1 key_url=$2 pinned=$3 line=$4 keyring=/etc/apt/keyrings/$1.gpg key found home
  install -d -m 0755 /etc/apt/keyrings
  if [ ! -s "$keyring" ] || { [ -n "$pinned" ] && ! key_pinned "$keyring" "$pinned"; }; then
    key=$(mktemp)
    curl -fsSL --retry 5 "$key_url" >"$key"
    if [ -n "$pinned" ] && ! key_pinned "$key" "$pinned"; then
      found=$(key_fingerprints "$key" | tr '\n' ' ')
      rm -f "$key" "$keyring" "/etc/apt/sources.list.d/$name.list"
      echo "apt repository $name: the key at $key_url has the fingerprint(s) ${found:-none (not an OpenPGP key)}, not the pinned $pinned (components/versions.py APT_KEY_FINGERPRINTS); refusing to use it (gpu-cluster:hardening.verifyAptKeys)" >&2
      exit 1
    fi
    home=$(mktemp -d)
    GNUPGHOME=$home gpg --batch --dearmor --yes -o "$keyring" <"$key"
    rm -rf "$home" "$key"
    chmod 0644 "$keyring"
  elif [ -z "$pinned" ]; then
    echo "apt repository $name: its key is not checked (gpu-cluster:hardening.verifyAptKeys is false)" >&2
  fi
  put_file "/etc/apt/sources.list.d/$name.list" 0644 <<<"${line/@KEYRING@/$keyring}" || true
}
