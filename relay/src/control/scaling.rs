//! Capacity that follows the load (`[instance.capacity]`): the scaler's decisions applied to
//! the running compute and recorded in the ledger.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::driver::RunningCompute;
use super::{Instance, Phase, State, scaler};

impl Instance {
    /// Scales the running compute with its load within `[instance.capacity]`, until `stop`
    /// fires: samples its CPU use every [`scaler::SAMPLE_EVERY`], resizes it live as the
    /// [`scaler::Scaler`] decides and records each change in the ledger.
    pub async fn scale_with_load(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let Some(capacity) = self.config.capacity else {
            return;
        };
        // The compute being scaled, its scaler and its last reading.
        let mut tracked: Option<(Arc<dyn RunningCompute>, scaler::Scaler, Duration, Instant)> =
            None;
        loop {
            tokio::select! {
                () = tokio::time::sleep(scaler::SAMPLE_EVERY) => {}
                () = stop.cancelled() => return,
            }
            let (running, ccu) = {
                let inner = self.lock();
                match &inner.state {
                    State::Running(r) => (Arc::clone(r), inner.ccu.unwrap_or(capacity.resume)),
                    _ => {
                        tracked = None;
                        continue;
                    }
                }
            };
            let Some(used) = running.cpu_usage().await else {
                continue;
            };
            let now = Instant::now();
            let (compute, scaler, last_used, last_at) = match &mut tracked {
                Some(t) if Arc::ptr_eq(&t.0, &running) => t,
                _ => {
                    // A new compute (or a new reading): start from what it has.
                    tracked = Some((running, scaler::Scaler::new(capacity, ccu), used, now));
                    continue;
                }
            };
            let elapsed = now.saturating_duration_since(*last_at).as_secs_f64();
            let cores = used.saturating_sub(*last_used).as_secs_f64() / elapsed.max(1e-3);
            (*last_used, *last_at) = (used, now);
            let Some(to) = scaler.sample(cores, now) else {
                continue;
            };
            match compute.resize(to).await {
                Ok(()) => {
                    let mut inner = self.lock();
                    if !matches!(&inner.state, State::Running(r) if Arc::ptr_eq(r, compute)) {
                        continue;
                    }
                    inner.ccu = Some(to);
                    self.metrics.set_ccu(&self.config.name, to.as_f64());
                    self.record(&inner, Phase::Running);
                    tracing::info!(instance = %self.config.name, from = %ccu, to = %to, cores_used = format!("{cores:.2}"), "capacity changed");
                }
                Err(e) => {
                    scaler.resized_to(ccu);
                    tracing::warn!(instance = %self.config.name, error = %e, to = %to, "cannot change the compute's capacity");
                }
            }
        }
    }

    /// An adopted running compute gets the capacity a wake starts with, so that the kernel,
    /// the scaler and the ledger agree from here on.
    pub(super) async fn adopt_capacity(&self, compute: &Arc<dyn RunningCompute>) {
        let Some(capacity) = self.config.capacity else {
            return;
        };
        match compute.resize(capacity.resume).await {
            Ok(()) => self.lock().ccu = Some(capacity.resume),
            Err(e) => {
                tracing::warn!(instance = %self.config.name, error = %e, "cannot set the adopted compute's capacity");
            }
        }
    }
}
