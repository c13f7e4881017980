//! The public stream types are newtypes over platform types, which keeps
//! the platform out of the API. Their `AsyncRead`/`AsyncWrite` impls only
//! forward to the wrapped value; these macros write them once.

/// Implements `AsyncRead` for a newtype by forwarding to its field `.0`.
macro_rules! forward_async_read {
    ($outer:ty) => {
        impl futures_lite::io::AsyncRead for $outer {
            fn poll_read(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &mut [u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
            }
        }
    };
}

/// Implements `AsyncWrite` for a newtype by forwarding to its field `.0`.
macro_rules! forward_async_write {
    ($outer:ty) => {
        impl futures_lite::io::AsyncWrite for $outer {
            fn poll_write(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
            }

            fn poll_flush(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.0).poll_flush(cx)
            }

            fn poll_close(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.0).poll_close(cx)
            }
        }
    };
}
