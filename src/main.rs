fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let proxy = portcullis::Proxy::new(portcullis::Config::default()).expect("bind");
    proxy.run().expect("run");
}
