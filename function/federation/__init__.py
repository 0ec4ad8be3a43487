"""The one typed Federation value an XR becomes, read once, and what every builder takes."""
