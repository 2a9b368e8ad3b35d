//! The process-wide shutdown signal, as every long-running task sees it (mini-redis's
//! `Shutdown`): a clone of one `watch` receiver that turns true once, when the gateway
//! starts to stop. A dropped sender counts as shutdown too, so a task never outlives the
//! gateway that started it.

use tokio::sync::watch;

#[derive(Clone, Debug)]
pub struct Shutdown {
    signal: watch::Receiver<bool>,
}

impl Shutdown {
    pub fn new(signal: watch::Receiver<bool>) -> Shutdown {
        Shutdown { signal }
    }

    /// Resolves once shutdown has begun (at once if it already has).
    pub async fn wait(&mut self) {
        let _ = self.signal.wait_for(|stop| *stop).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn resolves_on_the_signal_and_when_the_sender_is_gone() {
        let (tx, rx) = watch::channel(false);
        let mut s = Shutdown::new(rx);
        tx.send(true).unwrap();
        s.wait().await;
        let (tx, rx) = watch::channel(false);
        drop(tx);
        Shutdown::new(rx).wait().await;
    }
}
