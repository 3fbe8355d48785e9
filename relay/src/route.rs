//! The two ways a client's connection reaches a compute, named once for the control plane
//! (open connections by route), the metrics (`relay_active_connections{route}`) and the
//! admin API. How a running compute is reached — the pump or the kernel — is
//! `config::RouteMode`, a different question.

/// The route of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// Raw bytes to a running compute, which greets and authenticates the client itself.
    Direct,
    /// Held by the perceptron: greeted, classified, woken, relayed login.
    Perceptron,
}

impl Route {
    /// The name in metric labels.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Perceptron => "perceptron",
        }
    }
}
