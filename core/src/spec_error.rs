//! Why a job spec was refused, with the field named and the message kept
//! short: a refused value can be megabytes long.

use crate::job::MAX_TASKS;

/// Why a job spec was refused: the file's text (JSON syntax, a field of the
/// wrong type) or a value outside what a job may have. Messages quote at
/// most [`MAX_MESSAGE_CHARS`] characters of what was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The text is not a job spec; `path` is where in it (`models[0].steps`),
    /// `None` for the text as a whole.
    #[error("job spec: {}{message}", path.as_deref().map(|p| format!("{p}: ")).unwrap_or_default())]
    Parse {
        path: Option<String>,
        message: String,
    },
    /// A field holds a value a job may not have.
    #[error("{field}: {problem}")]
    Field { field: String, problem: String },
    /// More tasks than a job may have (counted, not planned).
    #[error("{tasks} tasks (models × assets); at most {MAX_TASKS} per job")]
    TooManyTasks { tasks: usize },
}

impl SpecError {
    /// A refusal of `field` (as the spec names it) for `problem`; the whole
    /// message is cut to about [`MAX_MESSAGE_CHARS`] characters.
    pub fn field(field: impl Into<String>, problem: impl Into<String>) -> Self {
        let field = brief_to(field.into(), MAX_PATH_CHARS);
        let room = MAX_MESSAGE_CHARS - field.chars().count().min(MAX_PATH_CHARS);
        SpecError::Field {
            problem: brief_to(problem.into(), room),
            field,
        }
    }

    /// The text did not read as a job spec, at `path` (serde's path to the
    /// field) when there is one; cut like [`SpecError::field`].
    pub fn parse(path: Option<String>, message: impl Into<String>) -> Self {
        let path = path.map(|p| brief_to(p, MAX_PATH_CHARS));
        let used = path
            .as_ref()
            .map_or(0, |p| p.chars().count().min(MAX_PATH_CHARS));
        SpecError::Parse {
            message: brief_to(message.into(), MAX_MESSAGE_CHARS - used),
            path,
        }
    }

    /// The field the refusal names, if it names one.
    pub fn field_name(&self) -> Option<&str> {
        match self {
            SpecError::Parse { path, .. } => path.as_deref(),
            SpecError::Field { field, .. } => Some(field),
            SpecError::TooManyTasks { .. } => None,
        }
    }
}

/// Longest refusal [`JobSpec::from_json`](crate::job::JobSpec::from_json) gives, in characters.
pub const MAX_MESSAGE_CHARS: usize = 1000;

/// Longest field path a refusal quotes, in characters.
const MAX_PATH_CHARS: usize = 200;

/// `message` cut to `limit` characters (serde quotes a refused string whole).
fn brief_to(message: String, limit: usize) -> String {
    match message.char_indices().nth(limit) {
        None => message,
        Some((cut, _)) => format!("{}… ({} bytes in all)", &message[..cut], message.len()),
    }
}
