"""The parameter-server protocol: the servers, and TensorFlow's step barrier."""
