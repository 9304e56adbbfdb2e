// SPDX-License-Identifier: Apache-2.0
//! The crate's one error type: weightd's code, the slot, checkpoint and tensor it is about, and
//! weightd's sentence.
use std::fmt;

/// The codes of `weightd/error.h` (the numbers of `weightd.ErrorCode` in the wire protocol).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    InvalidArgument,
    NotFound,
    PermissionDenied,
    BadCheckpoint,
    Unsupported,
    SourceChanged,
    Io,
    ResourceExhausted,
    LimitExceeded,
    Protocol,
    Internal,
    Disconnected,
    OutOfRange,
    UnknownSource,
    UnknownTensor,
    EmptyInputs,
    DtypeMismatch,
    ShapeMismatch,
    AxisOutOfRange,
    ElementCountMismatch,
    ByteCountMismatch,
    NotAPermutation,
    ZeroSized,
    UnsupportedCast,
    Overflow,
    RecipeTooDeep,
    RecipeTooLarge,
    DuplicateName,
    BadAlias,
    AliasCycle,
    SlotMismatch,
    Cancelled,
    UnsupportedVersion,
    ScaleMismatch,
    /// A code this crate does not know (from a newer libweightd).
    Other(i32),
}

const CODES: &[(i32, ErrorCode)] = &[
    (1, ErrorCode::InvalidArgument),
    (2, ErrorCode::NotFound),
    (3, ErrorCode::PermissionDenied),
    (4, ErrorCode::BadCheckpoint),
    (5, ErrorCode::Unsupported),
    (6, ErrorCode::SourceChanged),
    (7, ErrorCode::Io),
    (8, ErrorCode::ResourceExhausted),
    (9, ErrorCode::LimitExceeded),
    (10, ErrorCode::Protocol),
    (11, ErrorCode::Internal),
    (12, ErrorCode::Disconnected),
    (13, ErrorCode::OutOfRange),
    (20, ErrorCode::UnknownSource),
    (21, ErrorCode::UnknownTensor),
    (22, ErrorCode::EmptyInputs),
    (23, ErrorCode::DtypeMismatch),
    (24, ErrorCode::ShapeMismatch),
    (25, ErrorCode::AxisOutOfRange),
    (26, ErrorCode::ElementCountMismatch),
    (27, ErrorCode::ByteCountMismatch),
    (28, ErrorCode::NotAPermutation),
    (29, ErrorCode::ZeroSized),
    (30, ErrorCode::UnsupportedCast),
    (31, ErrorCode::Overflow),
    (32, ErrorCode::RecipeTooDeep),
    (33, ErrorCode::RecipeTooLarge),
    (40, ErrorCode::DuplicateName),
    (41, ErrorCode::BadAlias),
    (42, ErrorCode::AliasCycle),
    (43, ErrorCode::SlotMismatch),
    (55, ErrorCode::Cancelled),
    (56, ErrorCode::UnsupportedVersion),
    (65, ErrorCode::ScaleMismatch),
];

impl ErrorCode {
    /// The code for weightd's number (positive, or a call's negative return value).
    pub fn from_raw(code: i32) -> ErrorCode {
        let code = code.checked_abs().unwrap_or(0);
        CODES.iter().find(|(n, _)| *n == code).map(|(_, c)| *c).unwrap_or(ErrorCode::Other(code))
    }

    /// weightd's number for the code (`WEIGHTD_E_*`).
    pub fn raw(self) -> i32 {
        match self {
            ErrorCode::Other(n) => n,
            c => CODES.iter().find(|(_, k)| *k == c).map(|(n, _)| *n).unwrap_or(0),
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What went wrong: weightd's code and sentence, and the slot, checkpoint, tensor, recipe node
/// and axis it names (empty or `None` where they do not apply). It is `Send + Sync + 'static`,
/// so it travels in `Box<dyn std::error::Error + Send + Sync>` and across threads.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let daemon = weightd::testing::Daemon::with_sample()?;
/// use weightd::{Client, ErrorCode};
///
/// let client = Client::connect(Some(daemon.socket()), "doc")?;
/// let err = client.describe("no-such-checkpoint").unwrap_err();
/// assert_eq!(err.code(), ErrorCode::UnknownSource);
/// assert_eq!(err.code().name(), "unknown-source");
/// assert!(err.to_string().contains("no-such-checkpoint"));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub(crate) code: ErrorCode,
    pub(crate) message: String,
    pub(crate) slot: String,
    pub(crate) checkpoint: String,
    pub(crate) tensor: String,
    pub(crate) node: Option<u32>,
    pub(crate) axis: Option<i32>,
    pub(crate) expected: i64,
    pub(crate) actual: i64,
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error found on the Rust side (a typed view that does not fit, a bad argument).
    pub(crate) fn local(code: ErrorCode, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
            slot: String::new(),
            checkpoint: String::new(),
            tensor: String::new(),
            node: None,
            axis: None,
            expected: 0,
            actual: 0,
        }
    }

    /// An error of the caller's own (e.g. a check of an engine's parameter against a weight)
    /// with weightd's code, so that a backend reports one error type.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error::local(code, message)
    }

    /// The same error, naming `slot`.
    pub fn with_slot(mut self, slot: &str) -> Error {
        self.slot = slot.to_string();
        self
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::local(ErrorCode::InvalidArgument, message)
    }

    pub fn code(&self) -> ErrorCode {
        self.code
    }
    /// weightd's complete sentence (names the checkpoint, tensor and slot involved).
    pub fn message(&self) -> &str {
        &self.message
    }
    /// The unit slot the error is about ("" when none).
    pub fn slot(&self) -> &str {
        &self.slot
    }
    pub fn checkpoint(&self) -> &str {
        &self.checkpoint
    }
    pub fn tensor(&self) -> &str {
        &self.tensor
    }
    /// The recipe node (0-based, in post-order) the error is about.
    pub fn node(&self) -> Option<u32> {
        self.node
    }
    pub fn axis(&self) -> Option<i32> {
        self.axis
    }
    /// The numbers compared, when the error compares numbers (else 0, 0).
    pub fn expected_actual(&self) -> (i64, i64) {
        (self.expected, self.actual)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "weightd: {}", self.code)
        } else {
            f.write_str(&self.message)
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_have_libweightd_names() {
        for (n, c) in CODES {
            assert_eq!(ErrorCode::from_raw(*n), *c);
            assert_eq!(ErrorCode::from_raw(-*n), *c);
            assert_eq!(c.raw(), *n);
            assert_ne!(c.name(), "", "{c:?}");
        }
        assert_eq!(ErrorCode::UnknownTensor.name(), "unknown-tensor");
        assert_eq!(ErrorCode::from_raw(999), ErrorCode::Other(999));
    }

    #[test]
    fn error_is_send_sync_static() {
        fn check<E: std::error::Error + Send + Sync + 'static>() {}
        check::<Error>();
    }
}
