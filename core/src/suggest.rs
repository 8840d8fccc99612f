//! "Did you mean …?": the known name closest to a mistyped one.

/// The candidate closest to `name` by edit distance (insertions, deletions,
/// substitutions and swaps of neighbours, case ignored), if one is close
/// enough to be what was meant: at most 1 edit for names up to 4
/// characters, 2 up to 8, 3 beyond. Ties go to the first candidate.
pub fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let name = name.to_lowercase();
    let allowed = match name.chars().count() {
        0 => return None,
        1..=4 => 1,
        5..=8 => 2,
        _ => 3,
    };
    candidates
        .into_iter()
        .map(|c| (distance(&name, &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= allowed)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// " (did you mean X?)" for a suggestion, "" for none.
pub fn did_you_mean(suggestion: &Option<String>) -> String {
    suggestion
        .as_ref()
        .map(|s| format!(" (did you mean {s}?)"))
        .unwrap_or_default()
}

/// Optimal string alignment distance between `a` and `b` (characters).
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        d[i * width] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(width) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_the_name_and_strangers_find_nothing() {
        let loaded = ["dqn", "mamba2", "ppo", "template", "tft"];
        assert_eq!(nearest("dqnn", loaded), Some("dqn"));
        assert_eq!(nearest("DQN", loaded), Some("dqn"));
        assert_eq!(nearest("tempalte", loaded), Some("template"));
        assert_eq!(nearest("mamba", loaded), Some("mamba2"));
        assert_eq!(nearest("ppo2", loaded), Some("ppo"));
        assert_eq!(nearest("transformer", loaded), None);
        assert_eq!(nearest("", loaded), None);
        assert_eq!(did_you_mean(&Some("dqn".into())), " (did you mean dqn?)");
        assert_eq!(did_you_mean(&None), "");
    }
}
