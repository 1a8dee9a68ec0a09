"""ServeLab's core: plain Python, no Streamlit. Pages import what they need from here."""
