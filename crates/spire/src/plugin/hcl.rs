//! The subset of HCL that the plugins' `plugin_data` uses (stand-in until
//! the plumbing lands).

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HclError(pub String);

pub struct Body;

impl Body {
    pub fn parse(_text: &str) -> Result<Body, HclError> {
        unimplemented!()
    }
    pub fn check_keys(&self, _known: &[&str]) -> Result<(), HclError> {
        unimplemented!()
    }
    pub fn string(&self, _key: &str) -> Result<Option<String>, HclError> {
        unimplemented!()
    }
    pub fn boolean(&self, _key: &str) -> Result<Option<bool>, HclError> {
        unimplemented!()
    }
    pub fn integers(&self, _key: &str) -> Result<Option<Vec<u64>>, HclError> {
        unimplemented!()
    }
    pub fn strings(&self, _key: &str) -> Result<Option<Vec<String>>, HclError> {
        unimplemented!()
    }
}
