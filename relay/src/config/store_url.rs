//! `[instance.offload] store`: a URL parsed into where the objects go (no I/O).

/// Where a `store` URL points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `file:///dir`: a local directory.
    File(String),
    /// `s3://bucket/prefix`.
    S3(S3Location),
}

/// A bucket, and the key prefix under which this store's objects go (empty: the bucket's
/// root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    /// The bucket's name.
    pub bucket: String,
    /// Without leading or trailing `/`.
    pub prefix: String,
}

/// Why a `store` value is not a store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreUrlError {
    /// The value as written.
    pub url: String,
    /// What is wrong with it.
    pub problem: UrlProblem,
}

/// What is wrong with a `store` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlProblem {
    /// `file://` with a relative path.
    RelativePath,
    /// `s3://` with this, which is not a bucket name.
    BucketName(String),
    /// An S3 prefix with an empty, `.` or `..` part.
    PrefixPart,
    /// Neither `file://` nor `s3://`.
    Scheme,
}

impl std::fmt::Display for StoreUrlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let url = &self.url;
        match &self.problem {
            UrlProblem::RelativePath => {
                write!(
                    f,
                    "{url:?}: a file store needs an absolute path (file:///dir)"
                )
            }
            UrlProblem::BucketName(bucket) => write!(
                f,
                "{url:?}: {bucket:?} is not an S3 bucket name (3 to 63 lowercase letters, \
                 digits, '.' and '-', starting and ending with a letter or digit)"
            ),
            UrlProblem::PrefixPart => {
                write!(
                    f,
                    "{url:?}: the prefix may not hold empty, '.' or '..' parts"
                )
            }
            UrlProblem::Scheme => {
                write!(
                    f,
                    "{url:?}: not a store URL (file:///dir or s3://bucket/prefix)"
                )
            }
        }
    }
}

impl std::error::Error for StoreUrlError {}

impl StoreUrl {
    /// Parses a `store` value.
    ///
    /// # Errors
    /// [`StoreUrlError`]: what is wrong with it.
    pub fn parse(url: &str) -> Result<Self, StoreUrlError> {
        let refuse = |problem| StoreUrlError {
            url: url.to_owned(),
            problem,
        };
        if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(refuse(UrlProblem::RelativePath));
            }
            return Ok(Self::File(path.to_owned()));
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if !is_bucket_name(bucket) {
                return Err(refuse(UrlProblem::BucketName(bucket.to_owned())));
            }
            let prefix = prefix.trim_matches('/');
            if prefix
                .split('/')
                .any(|part| part == "." || part == ".." || (part.is_empty() && !prefix.is_empty()))
            {
                return Err(refuse(UrlProblem::PrefixPart));
            }
            return Ok(Self::S3(S3Location {
                bucket: bucket.to_owned(),
                prefix: prefix.to_owned(),
            }));
        }
        Err(refuse(UrlProblem::Scheme))
    }
}

fn is_bucket_name(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (3..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
        && edge(name.chars().next())
        && edge(name.chars().last())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls_name_a_directory_or_a_bucket_and_prefix() {
        assert_eq!(
            StoreUrl::parse("file:///var/lib/objects"),
            Ok(StoreUrl::File("/var/lib/objects".into()))
        );
        assert_eq!(
            StoreUrl::parse("s3://my-bucket/perceptron/eu/"),
            Ok(StoreUrl::S3(S3Location {
                bucket: "my-bucket".into(),
                prefix: "perceptron/eu".into()
            }))
        );
        assert_eq!(
            StoreUrl::parse("s3://b.example"),
            Ok(StoreUrl::S3(S3Location {
                bucket: "b.example".into(),
                prefix: String::new()
            }))
        );
        for bad in [
            "file://relative/dir",
            "s3://",
            "s3://ab",
            "s3://Upper",
            "s3://-edge",
            "s3://b_under/x",
            "s3://bucket/a//b",
            "s3://bucket/a/../b",
            "gs://bucket",
            "/var/lib/objects",
        ] {
            assert!(StoreUrl::parse(bad).is_err(), "{bad} accepted");
        }
    }
}
