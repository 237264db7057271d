# Sourced by bench/sample_cached.sh and bench/sample_past_window.sh, from the repository root:
# `ein sample` for an old build and this one side by side, alternating, per round, as rows of
# a Markdown table; and `tokens N`, a prompt of N token ids.
#
#   ab_rows OLD ROUNDS SED RATIO CONFIG...
#
# OLD an ein binary; SED the sed expression that prints the figure from `ein sample`'s stderr;
# RATIO new/old (a rate: higher is better) or old/new (a time); each CONFIG
# "name|script|weights file in $DIR|sample arguments" (the arguments split at spaces).
# $NEW_ARGS, when set, goes to the new side's runs only (OLD this build: an option against
# none).

tokens() {  # N: N token ids of GPT-2's vocabulary, as a --tokens list
  python3 -c "print(','.join(str((i * 7919) % 50257) for i in range($1)))"
}

sample_figure() {  # BINARY SED SCRIPT WEIGHTS ARGS...
  local bin=$1 sed_expr=$2 script=$3 weights=$4
  shift 4
  "$bin" sample "$script" "$weights" "$@" --temperature 0 --device cpu 2>&1 >/dev/null |
    sed -n "$sed_expr"
}

ab_rows() {
  local old_bin=$1 rounds=$2 sed_expr=$3 ratio=$4
  shift 4
  local round config name script weights args old new value
  for round in $(seq "$rounds"); do
    for config in "$@"; do
      IFS='|' read -r name script weights args <<<"$config"
      # shellcheck disable=SC2086  # args is a word list
      old=$(sample_figure "$old_bin" "$sed_expr" "$script" "$DIR/$weights" $args)
      # shellcheck disable=SC2086
      new=$(sample_figure build/bin/ein "$sed_expr" "$script" "$DIR/$weights" $args \
            ${NEW_ARGS:-})
      if [ "$ratio" = new/old ]; then
        value=$(bc -l <<<"$new / $old")
      else
        value=$(bc -l <<<"$old / $new")
      fi
      printf '| %s | %s | %s | %s | %.2f |\n' "$name" "$weights" "$old" "$new" "$value"
    done
  done
}
